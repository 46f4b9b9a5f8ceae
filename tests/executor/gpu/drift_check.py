"""One rank of the executor's drift check (started by ``python -m loom.launch -n N``): every plan file given
runs 1,000 calls back to back without a host synchronisation, then 1,000 more as replays of a CUDA graph
that holds 10 calls. Call k's input is the base input + k, so a call that read a stale LL packet, the other
scratch half or a neighbour's data shows up; each call's output is summed on the device next to the sum of
its float64 reference, and the two sums must be equal at the end (int32 data: every value is exact).

    python -m loom.launch -n 2 tests/executor/gpu/drift_check.py --plans DIR --sizes 4100,1048592
    python tests/executor/gpu/drift_check.py --share-gpu 4 --plans DIR     # 4 ranks sharing GPU 0
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
from plan_check import buffers  # noqa: E402
from reference import as_float64, expected_output, make_input  # noqa: E402

DTYPE = "int32"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4100,1048592", help="message bytes, comma-separated")
    parser.add_argument("--calls", type=int, default=1000, help="eager calls, and graph-replayed calls")
    parser.add_argument("--calls-per-graph", type=int, default=10)
    parser.add_argument("--filter", default="", help="only plan files whose name contains this")
    ranks.add_plan_arguments(parser)
    return parser.parse_args()


class Run:
    """The device-side state of one plan and size: bases of every rank, the call counter, both sums."""

    def __init__(self, plan, executor, rank: int, world: int, size: int, seed: int) -> None:
        self.plan, self.executor, self.rank, self.world = plan, executor, rank, world
        self.bases = [make_input(seed, r, size, DTYPE, "cuda") for r in range(world)]
        count = self.bases[0].numel()
        self.stores = {
            "input": torch.empty(count, dtype=torch.int32, device="cuda"),
            "output": torch.empty(count * world, dtype=torch.int32, device="cuda"),
        }
        self.step = torch.zeros((), dtype=torch.int32, device="cuda")
        self.got = None
        self.wanted = None

    def call(self) -> None:
        """One call with input base + step, its output and reference added to the sums; no host sync."""
        self.step += 1
        inputs = [base + self.step for base in self.bases]
        source, target = buffers(self.plan, self.rank, self.world, inputs[self.rank], self.stores)
        self.executor.execute(self.plan, source, target)
        reference, _ = expected_output(self.plan, self.rank, inputs)
        output = as_float64(target)
        if self.got is None:
            self.got, self.wanted = torch.zeros_like(output), torch.zeros_like(reference)
        self.got += output
        self.wanted += reference

    def mismatch(self) -> str:
        ranks.synchronize()
        bad = torch.nonzero(self.got != self.wanted).flatten()
        if bad.numel() == 0:
            return ""
        i = int(bad[0])
        first = f"[{i}] {self.got[i].item()} vs {self.wanted[i].item()}"
        return f"{bad.numel()} of {self.got.numel()} sums differ, first {first}"


def check_rank(bootstrap, args: argparse.Namespace) -> int:
    rank = bootstrap.rank
    executor = loom.Executor(
        _native.Communicator(bootstrap), verified=False
    )  # plans proven where built: this checks the GPU executor
    try:
        return check_plans(bootstrap, executor, args)
    except Exception:
        print(f"rank {rank} device report: {executor.communicator.device_timeout_report()}", flush=True)
        raise


def check_plans(bootstrap, executor, args: argparse.Namespace) -> int:
    rank, world = bootstrap.rank, bootstrap.world_size
    failures = 0
    for path in sorted(p for p in Path(args.plans).glob("*.json") if args.filter in p.name):
        plan = _native.Plan.load(str(path))
        if plan.world_size != world:
            continue
        for size in (int(s) for s in args.sizes.split(",")):
            unit = 4 * (world if plan.collective in ("reducescatter", "alltoall") else 1)
            size = size // unit * unit
            if not plan.min_message_bytes <= size <= plan.max_message_bytes or size == 0:
                continue
            seed = zlib.crc32(f"{path.name} {size}".encode())
            eager = Run(plan, executor, rank, world, size, seed)
            for _ in range(args.calls):
                eager.call()
            runs = [("eager", eager)]
            if not args.share_gpu:
                # Ranks sharing a GPU capture on several threads at once, and torch registers its one CUDA
                # generator with every capture: a second capture at the same time is refused. Their
                # graphs are checked by collective_api_check.py instead.
                runs.append(("graph", replayed_run(plan, executor, rank, world, size, seed, args)))
            for mode, run in runs:
                problem = run.mismatch()
                if problem:
                    failures += 1
                    print(f"rank {rank} FAIL {path.name} {size} B {mode}: {problem}", flush=True)
            if rank == 0:
                print(f"{path.name} {size} B: {args.calls} calls each of {', '.join(m for m, _ in runs)}", flush=True)
    bootstrap.barrier()
    return failures


def replayed_run(plan, executor, rank: int, world: int, size: int, seed: int, args: argparse.Namespace) -> Run:
    """args.calls calls as replays of a CUDA graph that holds args.calls_per_graph of them."""
    replayed = Run(plan, executor, rank, world, size, seed)
    replayed.call()  # outside capture: builds the context the graph will use
    graph = torch.cuda.CUDAGraph()
    with ranks.capture(graph):
        for _ in range(args.calls_per_graph):
            replayed.call()
    for _ in range(args.calls // args.calls_per_graph):
        graph.replay()
    return replayed


if __name__ == "__main__":
    arguments_given = arguments()
    sys.exit(ranks.run(arguments_given, lambda bootstrap: check_rank(bootstrap, arguments_given)))
