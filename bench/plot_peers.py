"""Plot bench/peers.py results: one panel per collective and data type, microseconds per call against message
size, a line per peer (one timing mode). Several result files are merged (later files win for the same peer,
collective, dtype, size and mode):

    python bench/plot_peers.py docs/perf/peers.png docs/perf/data/peers_*.json [--mode graph]
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def merged(paths: list[str], mode: str) -> tuple[dict, dict]:
    """({(collective, dtype): {peer: {bytes: us}}}, the first file's header)."""
    panels: dict = {}
    header: dict = {}
    for path in paths:
        report = json.load(open(path))
        header = header or report
        for row in report["results"]:
            if row.get("us") is None or row.get("mode") != mode:
                continue
            panel = panels.setdefault((row["collective"], row["dtype"]), {})
            panel.setdefault(row["peer"], {})[row["bytes"]] = row["us"]
    return panels, header


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--mode", default="graph")
    args = parser.parse_args()
    panels, header = merged(args.sources, args.mode)
    keys = sorted(panels)
    columns = 2
    rows = (len(keys) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4 * rows), squeeze=False)
    for axis, key in zip(axes.flat, keys, strict=False):
        for peer, points in sorted(panels[key].items()):
            sizes = sorted(points)
            axis.plot(sizes, [points[s] for s in sizes], marker="o", markersize=3, label=peer)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_title(f"{key[0]}, {key[1]}")
        axis.set_xlabel("message bytes per rank")
        axis.set_ylabel("µs per call")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    for axis in list(axes.flat)[len(keys) :]:
        axis.set_visible(False)
    figure.suptitle(
        f"{header['world_size']} x {header['device']}, {args.mode}, torch {header['torch']}, NCCL {header['nccl']},"
        f" {header['date']}"
    )
    figure.tight_layout()
    figure.savefig(args.target, dpi=110)


if __name__ == "__main__":
    main()
