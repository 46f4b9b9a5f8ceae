"""How long the plan verifier takes for an 8-rank all-reduce with 8 instances (goal: under 5 s).

Compiles each --algorithm (default: every library all-reduce that runs on one node of
--world-size ranks) with --instances, without verifying, then times ``loom.verify.verify(plan,
calls=--calls)``, median of --repeats runs. The plan must verify clean.

    python bench/verify_bench.py [--algorithm NAME ...] [--world-size 8] [--ranks-per-node N]
                                 [--instances 8] [--calls 3] [--repeats 5] [--markdown docs/perf/verify.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

from compile_bench import _machine  # the same machine line as the compile benchmark
from loom.algorithms import ALGORITHMS
from loom.compiler.driver import compile_algorithm
from loom.verify import format_findings, verify
from loom.verify.program import Program
from loom.verify.report import FindingLog
from loom.version import __version__

GOAL_S = 5.0


def measure(algorithm: str, world_size: int, per_node: int | None, instances: int, calls: int, repeats: int) -> dict:
    text = compile_algorithm(algorithm, world_size, per_node, instances=instances, verify=False)
    plan = json.loads(text)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        findings = verify(plan, calls=calls)
        times.append(time.perf_counter() - start)
        if findings:
            raise SystemExit(f"{algorithm} does not verify:\n{format_findings(findings, 5)}")
    program = Program(plan, FindingLog())
    steps = sum(len(steps) for steps in program.blocks.values())
    accesses = sum(
        ref.count for steps in program.blocks.values() for step in steps for ref, _ in step.reads + step.writes
    )
    return {
        "algorithm": algorithm,
        "shape": f"{world_size} ranks" + (f" ({per_node} per node)" if per_node and per_node != world_size else ""),
        "instances": instances,
        "calls": calls,
        "repeats": repeats,
        "threadblocks": len(program.blocks),
        "ops": sum(len(tb["ops"]) for gpu in plan["gpus"] for tb in gpu["threadblocks"]),
        "steps": steps,
        "accesses": accesses,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "machine": _machine(),
        "date": datetime.date.today().isoformat(),
        "python": sys.version.split()[0],
    }


def report(results: list[dict]) -> str:
    first = results[0]
    lines = [
        "# Verification time",
        "",
        "Rerun: `python bench/verify_bench.py --markdown docs/perf/verify.md`",
        "",
        f"machine: {first['machine']}; loom {__version__}; date {first['date']}; median of {first['repeats']} runs"
        " per row",
        "",
        "`loom.verify.verify(plan, calls=N)` on a compiled plan: every thread block of every rank run",
        "symbolically for N consecutive calls, with the postcondition, race, deadlock, bounds and packet",
        "checks. Steps are ops with pipelines unrolled, per call; accesses are sub-chunk reads and writes",
        "per call.",
        "",
        "| plan | calls | thread blocks | ops | steps | accesses | verify s | min s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r['algorithm']}, {r['shape']}, {r['instances']} instances | {r['calls']} | {r['threadblocks']}"
            f" | {r['ops']} | {r['steps']} | {r['accesses']} | **{r['median_s']:.3f}** | {r['min_s']:.3f} |"
        )
    lines.append("")
    for r in results:
        met = "met" if r["median_s"] < GOAL_S else "NOT met"
        lines.append(f"- goal: {r['algorithm']} under {GOAL_S:g} s -> {met} ({r['median_s']:.3f} s)")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", action="append", help="library algorithm, repeatable")
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--ranks-per-node", type=int, help="default: all on one node")
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--calls", type=int, default=3, help="default 3, as loom verify and loom compile run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--markdown", metavar="FILE", help="also write the results as Markdown to FILE")
    args = parser.parse_args(argv)
    algorithms = args.algorithm or [
        name
        for name, entry in sorted(ALGORITHMS.items())
        if entry.collective == "allreduce" and args.world_size in entry.world_sizes
    ]
    results = [
        measure(name, args.world_size, args.ranks_per_node, args.instances, args.calls, args.repeats)
        for name in algorithms
    ]
    text = report(results)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
