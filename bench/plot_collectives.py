"""Plot bench/collective_bench.py results: bus bandwidth and latency of Loom and NCCL per collective.

python bench/plot_collectives.py docs/perf/data/executor_2xh200_instances1.json docs/perf/executor.png
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(source: str, target: str) -> None:
    data = json.load(open(source))
    collectives = sorted({row["collective"] for row in data["rows"]})
    figure, axes = plt.subplots(2, len(collectives), figsize=(5 * len(collectives), 8), squeeze=False)
    for column, collective in enumerate(collectives):
        rows = [row for row in data["rows"] if row["collective"] == collective]
        sizes = [row["bytes"] for row in rows]
        for who, style in (("nccl", "o-"), ("loom", "s-")):
            present = [(row["bytes"], row) for row in rows if f"{who}_us" in row]
            axes[0][column].plot([s for s, _ in present], [r[f"{who}_busbw_gbs"] for _, r in present], style, label=who)
            axes[1][column].plot([s for s, _ in present], [r[f"{who}_us"] for _, r in present], style, label=who)
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
    figure.suptitle(f"{meta['world_size']} x {meta['device']}, NCCL {meta['nccl']}, CUDA {meta['cuda']}, graph replay")
    figure.tight_layout()
    figure.savefig(target, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
