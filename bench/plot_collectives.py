"""Plot bench/collective_bench.py results: bus bandwidth and latency of Loom and NCCL per collective.

python bench/plot_collectives.py docs/perf/data/executor_2xh200_instances1.json docs/perf/executor.png
python bench/plot_collectives.py FAST.json OUT.png --generic GENERIC.json   # adds the generic path's Loom line
python bench/plot_collectives.py CANDIDATES.json OUT.png --best   # an --every-plan run: the fastest plan per size
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# collective_bench.py --mode: how the calls were timed, for the title.
MODES = {
    "graph": "graph replay",
    "eager-reused": "eager calls, reused tensors",
    "eager-fresh": "eager calls, fresh tensors",
}


def main(source: str, target: str, generic: str | None = None, best: bool = False) -> None:
    data = json.load(open(source))
    if best:
        from tune_plans import fastest  # beside this file

        data["rows"] = [row for _, row in sorted(fastest(data["rows"]).items())]
    generic_rows = json.load(open(generic))["rows"] if generic else []
    collectives = sorted({row["collective"] for row in data["rows"]})
    figure, axes = plt.subplots(2, len(collectives), figsize=(5 * len(collectives), 8), squeeze=False)
    for column, collective in enumerate(collectives):
        rows = [row for row in data["rows"] if row["collective"] == collective]
        sizes = [row["bytes"] for row in rows]
        for who, style in (("nccl", "o-"), ("loom", "s-")):
            present = [(row["bytes"], row) for row in rows if f"{who}_us" in row]
            axes[0][column].plot([s for s, _ in present], [r[f"{who}_busbw_gbs"] for _, r in present], style, label=who)
            axes[1][column].plot([s for s, _ in present], [r[f"{who}_us"] for _, r in present], style, label=who)
        other = [row for row in generic_rows if row["collective"] == collective]
        if other:  # the same run with LOOM_FAST_PATH=0
            axes[0][column].plot(
                [r["bytes"] for r in other], [r["loom_busbw_gbs"] for r in other], "^--", label="loom generic"
            )
            axes[1][column].plot(
                [r["bytes"] for r in other], [r["loom_us"] for r in other], "^--", label="loom generic"
            )
        for row_index, label in ((0, "bus bandwidth (GB/s)"), (1, "latency (us)")):
            axis = axes[row_index][column]
            axis.set_xscale("log", base=2)
            axis.set_xlim(min(sizes), max(sizes))
            if row_index == 1:
                axis.set_yscale("log")
            axis.set_xlabel("message bytes (per rank input)")
            axis.set_ylabel(label)
            axis.set_title(collective)
            axis.grid(True, which="both", alpha=0.3)
            axis.legend()
    meta = data["meta"]
    timing = MODES.get(meta.get("mode", "graph"), meta.get("mode"))
    figure.suptitle(f"{meta['world_size']} x {meta['device']}, NCCL {meta['nccl']}, CUDA {meta['cuda']}, {timing}")
    figure.tight_layout()
    figure.savefig(target, dpi=90)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="collective_bench.py --out JSON")
    parser.add_argument("target", help="PNG to write")
    parser.add_argument("--generic", help="a run of the same sizes with LOOM_FAST_PATH=0, drawn beside")
    parser.add_argument(
        "--best", action="store_true", help="source is an --every-plan run: draw the fastest plan per size"
    )
    arguments = parser.parse_args()
    main(arguments.source, arguments.target, arguments.generic, arguments.best)
