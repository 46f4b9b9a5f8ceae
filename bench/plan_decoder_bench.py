"""How long the native decoder takes to load a large plan (goal: a 10 MB plan in under 50 ms).

Generates a valid 8-rank all-reduce-shaped plan of about --megabytes MB (many thread blocks of
put/signal/wait/reduce over memory channels), then times loom.Plan.load (file read + parse +
checks) and loom.Plan.parse (text already in memory), median of --repeats runs after a warm-up.

    python bench/plan_decoder_bench.py [--megabytes 10] [--repeats 20] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import loom

WORLD = 8
CHUNKS = 64


def _thread_block(rank: int, tb: int, rounds: int) -> dict:
    ops = []
    for step in range(rounds):
        channel = (tb + step) % (WORLD - 1)
        chunk = (tb * rounds + step) % CHUNKS
        ops += [
            {
                "op": "put",
                "src": {"buffer": "input", "index": chunk},
                "dsts": [{"channel": channel, "buffer": "scratch", "index": chunk}],
            },
            {"op": "signal", "channels": [channel]},
            {"op": "wait", "channels": [channel]},
            {
                "op": "reduce",
                "reduce_op": "sum",
                "srcs": [{"buffer": "input", "index": chunk}, {"buffer": "scratch", "index": chunk}],
                "dst": {"buffer": "output", "index": chunk},
            },
        ]
    return {"id": tb, "ops": ops}


def make_plan(threadblocks: int, rounds: int) -> dict:
    gpus = []
    for rank in range(WORLD):
        peers = [p for p in range(WORLD) if p != rank]
        gpus.append(
            {
                "id": rank,
                "input_chunks": CHUNKS,
                "output_chunks": CHUNKS,
                "scratch_chunks": CHUNKS,
                "channels": [{"id": i, "type": "memory", "peer": p} for i, p in enumerate(peers)],
                "threadblocks": [_thread_block(rank, tb, rounds) for tb in range(threadblocks)],
            }
        )
    return {
        "format_version": 1,
        "name": "decoder_bench",
        "collective": "allreduce",
        "protocol": "simple",
        "inplace": False,
        "world_size": WORLD,
        "ranks_per_node": WORLD,
        "threads_per_block": 1024,
        "min_message_bytes": 0,
        "max_message_bytes": 1 << 30,
        "alignment_bytes": 16,
        "gpus": gpus,
    }


def plan_text(megabytes: float) -> str:
    threadblocks = 32
    base = len(json.dumps(make_plan(threadblocks, 1)))
    per_round = len(json.dumps(make_plan(threadblocks, 2))) - base
    rounds = max(1, 1 + round((megabytes * 1e6 - base) / per_round))
    return json.dumps(make_plan(threadblocks, rounds))


def _first_load_ms(path: str) -> tuple[float, float]:
    """One load in a fresh process: nothing warm (parser buffers, allocator arenas)."""
    code = (
        "import time, loom; loom.Plan.load; t = time.perf_counter(); "
        f"loom.Plan.load({path!r}); print((time.perf_counter() - t) * 1e3)"
    )
    samples = [float(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(5)]
    return statistics.median(samples), min(samples)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _median_ms(fn, repeats: int) -> tuple[float, float]:
    fn()  # warm-up: page cache, allocator
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples), min(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--markdown", help="also write the result table to this file")
    args = parser.parse_args()

    text = plan_text(args.megabytes)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        handle.write(text)
        path = handle.name
    try:
        plan = loom.Plan.load(path)
        ops = sum(plan.summary()["ops_by_type"].values())
        first_ms, first_min = _first_load_ms(path)
        load_ms, load_min = _median_ms(lambda: loom.Plan.load(path), args.repeats)
        parse_ms, parse_min = _median_ms(lambda: loom.Plan.parse(text), args.repeats)
    finally:
        os.unlink(path)

    size_mb = len(text) / 1e6
    rows = [
        ("Plan.load, first load in a fresh process (5 processes)", first_ms, first_min),
        ("Plan.load, repeated (read + parse + checks)", load_ms, load_min),
        ("Plan.parse (text in memory)", parse_ms, parse_min),
    ]
    lines = [
        f"plan: {size_mb:.1f} MB, {WORLD} ranks, {plan.summary()['threadblocks']} thread blocks, {ops} ops",
        f"machine: {_cpu_model()}, {os.cpu_count()} cores, {platform.system()}; "
        f"date {datetime.date.today().isoformat()}; repeated rows: median of {args.repeats} after a warm-up",
        "",
        "| what | median ms | min ms | MB/s (median) |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {name} | {med:.1f} | {low:.1f} | {size_mb / (med / 1e3):.0f} |" for name, med, low in rows]
    verdict = "met" if load_ms < 50 else "MISSED"
    lines += ["", f"goal: a 10 MB plan loads in under 50 ms -> {verdict} ({load_ms:.1f} ms)"]
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as out:
            rerun = "Rerun: `python bench/plan_decoder_bench.py --markdown docs/perf/plan-decoder.md`"
            title = ["# Plan decoder load time", "", rerun, ""]
            out.write("\n".join(title + lines) + "\n")


if __name__ == "__main__":
    main()
