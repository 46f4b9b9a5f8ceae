"""One rank of the freed-buffers check (started by ``python -m loom.launch -n N``): each out-of-place plan
given, bound to user buffers, is called on new tensors after the previous ones were freed and PyTorch's
cache emptied (``torch.cuda.empty_cache()``, as vLLM does after profiling), so that CUDA may hand the same
memory out again as a new allocation. Every output must match its float64 reference exactly (int32 data),
and the executor must have dropped the contexts set up on the freed buffers: peers that still mapped the
old allocation could not map the new one (cudaErrorAlreadyMapped).

    python -m loom.launch -n 2 tests/executor/gpu/freed_buffers_check.py --plans DIR
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


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=4 << 20, help="message bytes (large: its own allocation)")
    parser.add_argument("--rounds", type=int, default=4)
    ranks.add_plan_arguments(parser)
    return parser.parse_args()


def check_rank(bootstrap, args: argparse.Namespace) -> int:
    rank, world = bootstrap.rank, bootstrap.world_size
    executor = loom.Executor(
        _native.Communicator(bootstrap), verified=False
    )  # plans proven where built: this checks the GPU executor
    failures = 0
    for path, plan, size in ranks.out_of_place_plans(args.plans, world, args.size):
        seed = zlib.crc32(path.name.encode())
        bases = [make_input(seed, r, size, DTYPE, "cuda") for r in range(world)]
        for round_ in range(args.rounds):
            source = (bases[rank] + round_).contiguous()
            wanted, _ = expected_output(plan, rank, [base + round_ for base in bases])
            target = torch.full((wanted.numel(),), -1, dtype=torch.int32, device="cuda")
            executor.execute(plan, source, target)
            ranks.synchronize()
            if not torch.equal(target.to(torch.float64), wanted):
                print(f"rank {rank} FAIL {path.name} round {round_}: wrong output", flush=True)
                failures += 1
            del source, target
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # the memory goes back to CUDA; the next round's may be the same
        if rank == 0:
            print(f"{path.name}: {args.rounds} rounds on freed and new buffers", flush=True)
    dropped = executor.stats()["freed_buffer_contexts_dropped"]
    if dropped == 0:
        print(f"rank {rank} FAIL: no context on a freed buffer was dropped", flush=True)
        failures += 1
    bootstrap.barrier()
    return failures


if __name__ == "__main__":
    arguments_given = arguments()
    sys.exit(ranks.run(arguments_given, lambda bootstrap: check_rank(bootstrap, arguments_given)))
