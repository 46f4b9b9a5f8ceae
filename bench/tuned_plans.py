"""Compile the plan set the benchmark runs: for each collective, one plan per message-size range, with
the algorithm, instance count and block size that were fastest there on 2 x H200 (an --every-plan run
of bench/collective_bench.py over candidates; docs/perf/executor.md). Ranges do not overlap, so the
benchmark's choice (the narrowest range that fits) is exactly this table.

    python bench/tuned_plans.py --world-size 2 --out build/tuned_plans
"""

from __future__ import annotations

import argparse
from pathlib import Path

from loom.compile import compile_algorithm

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# (algorithm, smallest bytes, largest bytes, instances, threads per block)
TABLE = [
    ("allreduce_allpairs_packet", 0, 32 * KiB, 4, 512),
    ("allreduce_allpairs_packet", 32 * KiB + 1, 512 * KiB, 8, 512),
    ("allreduce_rs_ag", 512 * KiB + 1, 64 * MiB, 64, 1024),
    ("allreduce_rs_ag_pipelined", 64 * MiB + 1, GiB, 64, 1024),
    ("allgather_fullmesh_packet", 0, 128 * KiB, 8, 512),
    ("allgather_fullmesh", 128 * KiB + 1, GiB, 64, 1024),
    ("reducescatter_fullmesh_packet", 0, 8 * KiB, 1, 256),
    ("reducescatter_fullmesh_packet", 8 * KiB + 1, 512 * KiB, 8, 512),
    ("reducescatter_read", 512 * KiB + 1, GiB, 64, 1024),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for algorithm, low, high, instances, threads in TABLE:
        name = f"{algorithm}_{args.world_size}r_{low}_{high}"
        text = compile_algorithm(
            algorithm,
            args.world_size,
            instances=instances,
            plan_name=name,
            min_message_size=low,
            max_message_size=high,
            num_threads_per_block=threads,
        )
        (out / f"{name}.json").write_text(text)
        print(f"{name}: {instances} instances x {threads} threads")


if __name__ == "__main__":
    main()
