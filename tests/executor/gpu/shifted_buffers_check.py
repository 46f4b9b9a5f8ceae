"""One rank of the moving-buffers check (started by ``python -m loom.launch -n N``, or ``--share-gpu N``):
each out-of-place plan given, bound to user buffers, is called with its input and output at another
place of the same two allocations every call, each rank choosing its own places (as nccl-tests does
with its per-iteration offsets, or a caching allocator): every output must match its float64 reference
exactly (int32 data), a CUDA graph captured at one place must still be right when replayed after calls
at others, and each plan must set up one context for all of them (peers' buffers move by a shift passed
with the launch, not by a new exchange).

    python -m loom.launch -n 2 tests/executor/gpu/shifted_buffers_check.py --plans DIR
"""

from __future__ import annotations

import argparse
import sys
import zlib
from pathlib import Path

import loom
import torch
from loom import _native

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ranks  # noqa: E402
from reference import expected_output, make_input  # noqa: E402

DTYPE = "int32"
PLACES = 8


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1 << 20, help="message bytes")
    parser.add_argument("--calls", type=int, default=12)
    ranks.add_plan_arguments(parser)
    return parser.parse_args()


def check_rank(bootstrap, args: argparse.Namespace) -> int:
    rank, world = bootstrap.rank, bootstrap.world_size
    executor = loom.Executor(
        _native.Communicator(bootstrap), verified=False
    )  # plans proven where built: this checks the GPU executor
    failures = 0
    for path, plan, size in ranks.out_of_place_plans(args.plans, world, args.size):
        before = executor.stats()["contexts_built"]
        failures += check_plan(plan, path.name, executor, rank, world, size, args.calls)
        built = executor.stats()["contexts_built"] - before
        # A port channel's proxy knows only the registered range: such plans set up a context per place.
        if built != 1 and '"port"' not in path.read_text():
            failures += 1
            print(f"rank {rank} FAIL {path.name}: {built} contexts set up for {args.calls} calls", flush=True)
    bootstrap.barrier()
    return failures


def check_plan(plan, name: str, executor, rank: int, world: int, size: int, calls: int) -> int:
    seed = zlib.crc32(name.encode())
    bases = [make_input(seed, r, size, DTYPE, "cuda") for r in range(world)]
    count = bases[0].numel()
    reference, _ = expected_output(plan, rank, bases)
    out_count = reference.numel()
    inputs = torch.zeros(PLACES * count, dtype=torch.int32, device="cuda")
    outputs = torch.zeros(PLACES * out_count, dtype=torch.int32, device="cuda")
    failures = 0

    def place(call: int) -> tuple[torch.Tensor, torch.Tensor]:
        # Each rank its own sequence of places: the ranks' buffers move at different calls.
        slot_in, slot_out = (call * (rank + 1)) % PLACES, (call * 5 + rank * 3) % PLACES
        source = inputs[slot_in * count : (slot_in + 1) * count]
        return source, outputs[slot_out * out_count : (slot_out + 1) * out_count]

    def expect(call: int, target: torch.Tensor, how: str) -> int:
        wanted, _ = expected_output(plan, rank, [base + call for base in bases])
        got = target.to(torch.float64)
        if torch.equal(got, wanted):
            return 0
        bad = torch.nonzero(got != wanted).flatten()
        print(f"rank {rank} FAIL {name} {how} call {call}: {bad.numel()} of {got.numel()} differ", flush=True)
        return 1

    for call in range(calls):
        source, target = place(call)
        source.copy_(bases[rank] + call)
        target.fill_(-1)
        executor.execute(plan, source, target)
        ranks.synchronize()
        failures += expect(call, target, "eager")
    # A graph captured at one place, replayed after eager calls at others.
    source, target = place(calls)
    source.copy_(bases[rank] + calls)
    graph = torch.cuda.CUDAGraph()
    with ranks.capture(graph):
        executor.execute(plan, source, target)
    for call in range(calls + 1, calls + 3):
        other_source, other_target = place(call)
        other_source.copy_(bases[rank] + call)
        executor.execute(plan, other_source, other_target)
    source.copy_(bases[rank] + calls)
    target.fill_(-1)
    ranks.synchronize()
    graph.replay()
    ranks.synchronize()
    failures += expect(calls, target, "graph")
    if rank == 0:
        print(f"{name} {size} B: {calls} calls at moving places and a replay: {failures} failures", flush=True)
    return failures


if __name__ == "__main__":
    arguments_given = arguments()
    sys.exit(ranks.run(arguments_given, lambda bootstrap: check_rank(bootstrap, arguments_given)))
