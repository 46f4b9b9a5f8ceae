"""One rank of the graph-lifetime check (started by ``python -m loom.launch -n N``): CUDA graphs hold call
contexts that the executor's caches would otherwise drop. More graphs than a plan keeps contexts (64),
each capturing an all-reduce of another size, then eager calls that grow the plan's scratch and fill the
plan cache past its 32 plans; then every graph is replayed and must give the right sum (int32 data).
A dropped context would be replayed from freed memory: run it under compute-sanitizer memcheck too.

    python -m loom.launch -n 2 tests/executor/gpu/graph_lifetime_check.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import loom
import torch
from loom import _native
from loom.compiler.driver import compile_algorithm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ranks  # noqa: E402

GRAPHS = 70


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    ranks.add_arguments(parser)
    return parser.parse_args()


def plan_of(world: int, name: str = "allreduce_allpairs_packet", **options):
    text = compile_algorithm(name, world, verify=False, min_message_size=0, max_message_size=1 << 22, **options)
    return _native.Plan.parse(text)


def check_rank(bootstrap, args: argparse.Namespace) -> int:
    rank, world = bootstrap.rank, bootstrap.world_size
    executor = loom.Executor(
        _native.Communicator(bootstrap), verified=False
    )  # plans proven where built: this checks the GPU executor
    plan = plan_of(world)
    captured = []
    for index in range(GRAPHS):
        count = 256 + 4 * index  # a size per graph: a context per graph
        source = torch.full((count,), rank + 1, dtype=torch.int32, device="cuda")
        target = torch.zeros(count, dtype=torch.int32, device="cuda")
        executor.execute(plan, source, target)  # its setup, outside the capture
        ranks.synchronize()
        graph = torch.cuda.CUDAGraph()
        with ranks.capture(graph):
            executor.execute(plan, source, target)
        captured.append((graph, source, target))
    # The plan's scratch grows (every context but the captured ones is dropped), and 40 other plans
    # pass through the plan cache.
    large = torch.ones(1 << 20, dtype=torch.int32, device="cuda")
    executor.execute(plan, large, torch.zeros_like(large))
    for index in range(40):
        other = plan_of(world, plan_name=f"passing_{index}")
        executor.execute(other, large[:256], torch.zeros(256, dtype=torch.int32, device="cuda"))
    ranks.synchronize()
    failures = 0
    expected = world * (world + 1) // 2
    for index, (graph, _, target) in enumerate(captured):
        target.zero_()
        ranks.synchronize()
        graph.replay()
        ranks.synchronize()
        if not torch.all(target == expected):
            print(f"rank {rank} FAIL graph {index}: {int((target != expected).sum())} wrong elements", flush=True)
            failures += 1
    stats = executor.stats()
    if rank == 0:
        print(f"{GRAPHS} graphs replayed after the caches turned over: {failures} failures; {stats}", flush=True)
    bootstrap.barrier()
    return failures


if __name__ == "__main__":
    arguments_given = arguments()
    sys.exit(ranks.run(arguments_given, lambda bootstrap: check_rank(bootstrap, arguments_given)))
