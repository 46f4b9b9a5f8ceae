"""Compile the plan set the benchmark runs: for each collective, one plan per message-size range, with
the algorithm, instance count and block size of the world size's tuned table
(loom.algorithms.tuned_sizes.table_for: measured on that many GPUs, or the 2-rank table scaled; shared
with the bundled default plans), the all-to-all too (one plan for every size where the table has no rows
of it). Ranges do not overlap, so the benchmark's choice
(the narrowest range that fits) is exactly this table.

    python bench/tuned_plans.py --world-size 2 --out build/tuned_plans
"""

from __future__ import annotations

import argparse
from pathlib import Path

from loom.algorithms.tuned_sizes import table_for
from loom.compiler.driver import compile_algorithm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for algorithm, low, high, instances, threads in table_for(args.world_size):
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
    if not any(row[0] == "alltoall_fullmesh" for row in table_for(args.world_size)):
        # A table tuned before all-to-all was: one plan for every size, as in the bundled set.
        name = f"alltoall_fullmesh_{args.world_size}r"
        (out / f"{name}.json").write_text(compile_algorithm("alltoall_fullmesh", args.world_size, plan_name=name))
        print(f"{name}: 1 instance x 1024 threads")


if __name__ == "__main__":
    main()
