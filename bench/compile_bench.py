"""How long the compiler takes, end to end, for an 8-rank all-reduce with 8 instances (goal: under 2 s).

Times ``compile_algorithm`` (record the DSL program + passes + emit, which includes the schema check)
for each --algorithm (default: allreduce_rs_ag and allreduce_allpairs_packet) at --world-size 8
with --instances 8, median of --repeats runs, and breaks the time down into its stages:
recording, passes, emit without the schema check, and the schema check alone.

    python bench/compile_bench.py [--algorithm NAME ...] [--instances 8] [--repeats 5]
                                  [--markdown docs/perf/compile.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

from loom.algorithms import get
from loom.compiler import emit
from loom.compiler.driver import compile_algorithm
from loom.ir import plan_to_dict
from loom.plan.schema import check_schema
from loom.verify import verify

GOAL_S = 2.0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _machine() -> str:
    return f"{_cpu_model()}, {os.cpu_count()} cores, {platform.system()}, Python {platform.python_version()}"


def _time(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def measure(algorithm: str, world_size: int, instances: int, repeats: int) -> dict:
    entry = get(algorithm)
    end_to_end = []
    stages = {"record": [], "passes": [], "emit without schema": [], "schema check": [], "verify": []}
    text = ""
    for _ in range(repeats):
        seconds, text = _time(lambda: compile_algorithm(algorithm, world_size, instances=instances, verify=False))
        end_to_end.append(seconds)
        # The same work again, stage by stage (emit_plan's steps, with the schema check timed apart).
        seconds, program = _time(lambda: entry.build(world_size, instances=instances))
        stages["record"].append(seconds)
        seconds, _ = _time(program.compile)
        stages["passes"].append(seconds)
        start = time.perf_counter()
        document = plan_to_dict(program.compile())
        document["metadata"] = {"parameters": program.parameters}
        emit._canonical_text(document)
        stages["emit without schema"].append(time.perf_counter() - start)
        start = time.perf_counter()
        check_schema(document)
        stages["schema check"].append(time.perf_counter() - start)
        compiled = json.loads(text)
        start = time.perf_counter()
        verify(compiled, calls=3)
        stages["verify"].append(time.perf_counter() - start)
    plan = json.loads(text)
    ops = 0
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            stack = list(tb["ops"])
            while stack:
                op = stack.pop()
                ops += 1
                stack.extend(op.get("body", []))
    return {
        "algorithm": algorithm,
        "world_size": world_size,
        "instances": instances,
        "repeats": repeats,
        "threadblocks": sum(len(gpu["threadblocks"]) for gpu in plan["gpus"]),
        "ops": ops,
        "bytes": len(text.encode()),
        "median_s": statistics.median(end_to_end),
        "min_s": min(end_to_end),
        "stages": {name: statistics.median(values) for name, values in stages.items()},
        "machine": _machine(),
        "date": datetime.date.today().isoformat(),
    }


def report(results: list[dict]) -> str:
    first = results[0]
    lines = [
        "# Compile time",
        "",
        "Rerun: `python bench/compile_bench.py --markdown docs/perf/compile.md`",
        "",
        f"machine: {first['machine']}; date {first['date']}; median of {first['repeats']} runs per row",
        "",
        "End to end is `compile_algorithm(..., verify=False)`: record the DSL program, run the passes, emit",
        "(which checks the plan against the JSON Schema). The stage columns time the same steps one by one;",
        "`verify` is what `loom compile` adds by default (the verifier, three calls; see docs/perf/verify.md).",
        "",
        "| plan | thread blocks | ops | JSON MB | end to end s | record s | passes s | emit without schema s"
        " | schema check s | verify s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        stages = r["stages"]
        lines.append(
            f"| {r['algorithm']}, {r['world_size']} ranks, {r['instances']} instances | {r['threadblocks']}"
            f" | {r['ops']} | {r['bytes'] / 1e6:.2f} | **{r['median_s']:.3f}** | {stages['record']:.3f}"
            f" | {stages['passes']:.3f} | {stages['emit without schema']:.3f} | {stages['schema check']:.3f}"
            f" | {stages['verify']:.3f} |"
        )
    lines.append("")
    for r in results:
        met = "met" if r["median_s"] < GOAL_S else "NOT met"
        share = r["stages"]["schema check"] / r["median_s"]
        lines.append(
            f"- goal: {r['algorithm']} under {GOAL_S:g} s end to end -> {met} ({r['median_s']:.3f} s);"
            f" the schema check (jsonschema) is {share:.0%} of it"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--algorithm",
        action="append",
        help="library algorithm, repeatable (default: allreduce_rs_ag and allreduce_allpairs_packet)",
    )
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--markdown", metavar="FILE", help="also write the results as Markdown to FILE")
    args = parser.parse_args(argv)
    algorithms = args.algorithm or ["allreduce_rs_ag", "allreduce_allpairs_packet"]
    results = [measure(name, args.world_size, args.instances, args.repeats) for name in algorithms]
    text = report(results)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
