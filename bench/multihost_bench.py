"""Across emulated hosts (issue 56): link round trips per small all-reduce, and bandwidth against the link's rate.

    python bench/multihost_bench.py [--calls 300] [--rate-mbit 200]     # as root: it makes network namespaces

Two network namespaces are the hosts (tests/multihost/netns_hosts.py), with 2 ranks each on the CPU backend: a job
of 2 nodes of 2 ranks, run by bench/multihost_rank.py through ``loom.Communicator`` and its selector.

1. Round trips: link 0 goes through tests/multihost/link_forwarder.py, adding a one-way delay of 0, 25 us and 1 ms.
   The link's round trip is measured by a TCP ping-pong over it; a size's median time per all-reduce divided by
   it is the call's round trips all told (the hosts' own work is in there too, which is why 0 added delay shows
   more), and the time a call gains from 0 to 1 ms each way, divided by what the round trip gains, is the link's
   share: the round trips the algorithm itself needs.
2. Bandwidth: a kernel bridge whose ports tbf shapes to ``--rate-mbit``; large all-reduces; the bus bandwidth
   (2 (n - 1) / n x bytes per rank / time, nccl-tests' definition) against the rate, and what crosses the link
   (each rank of a node pair sends 1/g of the message across: the hierarchical plans).

Prints docs/perf/multihost.md's tables and writes docs/perf/multihost.png.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "multihost"))
from netns_hosts import NamespacedHosts, namespaces_refused  # noqa: E402

RANK = str(Path(__file__).with_name("multihost_rank.py"))
SMALL = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10]
LARGE = [4 << 20, 16 << 20]
DELAYS_US = [0, 25, 1000]


def run_job(hosts: NamespacedHosts, sizes: list[int], calls: int, cache: str) -> list[dict]:
    """4 ranks, 2 per host, timing all-reduces of ``sizes``; rank 0's records."""
    command = [sys.executable, RANK, ",".join(map(str, sizes)), str(calls)]
    processes = hosts.start_ranks(4, command, env={"LOOM_CACHE_DIR": cache})
    outputs = []
    for process in processes:
        try:
            out, _ = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        outputs.append(out)
        if process.returncode != 0:
            raise SystemExit(f"a rank failed ({process.returncode}):\n{out[-3000:]}")
    return [json.loads(match) for match in re.findall(r"RESULT (\{.*\})", outputs[0])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rate-mbit", type=float, default=200.0)
    parser.add_argument("--cache", default="/tmp/loom-multihost-bench-cache")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "perf" / "multihost.png")
    args = parser.parse_args()
    refused = namespaces_refused()
    if refused:
        raise SystemExit(f"multihost_bench: {refused}")
    latency: dict[int, tuple[float, list[dict]]] = {}
    for delay in DELAYS_US:
        with NamespacedHosts(2, delay_us=delay) as hosts:
            round_trip = hosts.round_trip_s(0, 1)
            latency[delay] = (round_trip, run_job(hosts, SMALL, args.calls, args.cache))
    with NamespacedHosts(2, rate_mbit=args.rate_mbit) as hosts:
        bandwidth = run_job(hosts, LARGE, max(args.calls // 30, 5), args.cache)

    from loom.version import __version__

    print(f"{datetime.date.today()}, {platform.node()}, {platform.machine()}, Python {platform.python_version()},")
    print(f"Loom {__version__}; 2 hosts x 2 ranks, CPU backend; medians of {args.calls} calls")
    print()
    print("| added one-way delay | link round trip (us) | bytes per rank | plan | time per call (us) | round trips |")
    print("|---|---|---|---|---|---|")
    for delay, (round_trip, records) in latency.items():
        for record in records:
            trips = record["median_s"] / round_trip
            print(
                f"| {delay} us | {round_trip * 1e6:.0f} | {record['bytes']} | {record['plan']} |"
                f" {record['median_s'] * 1e6:.0f} | {trips:.2f} |"
            )
    print()
    print("| bytes per rank | time added by 1 ms each way (us) | in link round trips (the link's share) |")
    print("|---|---|---|")
    for size, added, trips in link_share(latency):
        print(f"| {size} | {added * 1e6:.0f} | {trips:.2f} |")
    print()
    columns = ["bytes per rank", "plan", "time per call (ms)", "bus bandwidth (Mbit/s)", "on the link (Mbit/s)"]
    print("| " + " | ".join([*columns, "link rate (Mbit/s)"]) + " |")
    print("|---|---|---|---|---|---|")
    for record in bandwidth:
        bus = 2 * 3 / 4 * record["bytes"] * 8 / record["median_s"] / 1e6
        # The hierarchical plans send each node's sum of every shard to the other node: the message, each way.
        link = record["bytes"] * 8 / record["median_s"] / 1e6
        print(
            f"| {record['bytes']} | {record['plan']} | {record['median_s'] * 1e3:.1f} | {bus:.0f} | {link:.0f} |"
            f" {args.rate_mbit:.0f} |"
        )
    plot(latency, args.plot)


def link_share(latency: dict[int, tuple[float, list[dict]]]) -> list[tuple[int, float, float]]:
    """(bytes, seconds a call gains from 0 to 1 ms added each way, that in round trips): the link's part of a call,
    without the hosts' own work."""
    (near, without), (far, delayed) = latency[0], latency[1000]
    return [
        (fast["bytes"], slow["median_s"] - fast["median_s"], (slow["median_s"] - fast["median_s"]) / (far - near))
        for fast, slow in zip(without, delayed, strict=True)
    ]


def plot(latency: dict[int, tuple[float, list[dict]]], path: Path) -> None:
    """Round trips per call against the size, one line per added delay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for delay, (round_trip, records) in latency.items():
        sizes = [record["bytes"] for record in records]
        trips = [record["median_s"] / round_trip for record in records]
        axes.plot(sizes, trips, "o-", label=f"+{delay} us one way (round trip {round_trip * 1e6:.0f} us)")
    share = link_share(latency)
    axes.plot([s[0] for s in share], [s[2] for s in share], "k^-", label="the link's share (0 to 1 ms each way)")
    axes.axhline(1.5, color="gray", linestyle="--", label="1.5 round trips (the target up to 64 KiB)")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("bytes per rank")
    axes.set_ylabel("link round trips per all-reduce")
    axes.set_title(f"all-reduce across 2 emulated hosts x 2 ranks, CPU backend ({datetime.date.today()})", fontsize=9)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
