"""Compile the plan set the benchmark runs: for each collective, one plan per message-size range, with
the algorithm, instance count and block size that were fastest there on 2 x H200 (the table is
loom.algorithms.tuned_sizes.TABLE, shared with the bundled default plans). Ranges do not overlap, so
the benchmark's choice (the narrowest range that fits) is exactly this table.

    python bench/tuned_plans.py --world-size 2 --out build/tuned_plans
"""

from __future__ import annotations

import argparse
from pathlib import Path

from loom.algorithms.tuned_sizes import TABLE
from loom.plan_compiler import compile_algorithm


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
