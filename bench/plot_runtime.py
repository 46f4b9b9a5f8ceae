"""Plots the runtime benchmark's JSON (build/tests/loom_runtime_bench --json FILE): LL packet
one-way latency by message size, and memory-channel put bandwidth by launch shape beside the copy
engine's. Needs matplotlib (`pip install matplotlib`).

    python bench/plot_runtime.py results.json [more.json ...] -o docs/perf/runtime.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="JSON files written by loom_runtime_bench --json")
    parser.add_argument("-o", "--output", type=Path, required=True, help="PNG to write")
    parser.add_argument("--title", default="Loom runtime, 2 GPUs")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(path.read_text()) for path in args.results]
    figure, (latency, bandwidth) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(runs)
    for index, run in enumerate(runs):
        sizes = sorted(run["ll_one_way_us"], key=int)
        latency.plot([int(s) for s in sizes], [run["ll_one_way_us"][s] for s in sizes], "o-", label=f"run {index + 1}")
        shapes = list(run["put_gbs"])
        bandwidth.bar(
            [i + 0.4 * index for i in range(len(shapes))],
            [run["put_gbs"][s] for s in shapes],
            0.4,
            label=f"put, run {index + 1}",
        )
        bandwidth.axhline(
            run["copy_engine_gbs"], linestyle="--", color="gray", label="copy engine" if index == 0 else None
        )
        bandwidth.set_xticks(
            [i + width * (len(runs) - 1) / 2 for i in range(len(shapes))], shapes, rotation=45, fontsize=8
        )
    round_trips = ", ".join(f"{run['pingpong_round_trip_us']:.2f}" for run in runs)
    latency.set(
        xscale="log", xlabel="bytes", ylabel="µs", title=f"LL packet one-way latency (ping-pong RTT {round_trips} µs)"
    )
    bandwidth.set(xlabel="blocks x threads", ylabel="GB/s", title="memory-channel put, 1 GiB")
    latency.legend()
    bandwidth.legend(fontsize=8)
    figure.suptitle(args.title)
    figure.tight_layout()
    figure.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
