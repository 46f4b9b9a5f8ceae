"""One rank of bench/multihost_bench.py: CPU-backend all-reduces across emulated hosts, timed.

    python multihost_rank.py SIZE[,SIZE...] CALLS

Run with torchrun's variables (the harness sets them). For each size (bytes per rank) it checks one call against
the exact sum, then times CALLS back-to-back calls after a warm-up; rank 0 prints one ``RESULT {...}`` line per
size: the median and mean seconds per call, and the plan the selector took.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np


def main(sizes: list[int], calls: int) -> None:
    import loom
    from loom.runtime import registry

    comm = loom.Communicator(host_only=True)
    rank, world = comm.rank, comm.world_size
    for size in sizes:
        count = size // 4
        data = np.arange(count, dtype=np.float32) % 251 + rank
        comm.all_reduce(data)
        expected = (np.arange(count, dtype=np.float32) % 251) * world + world * (world - 1) / 2
        if not np.array_equal(data, expected):
            raise SystemExit(f"rank {rank}: the all-reduce of {size} bytes is wrong")
        for _ in range(max(calls // 10, 5)):
            comm.all_reduce(data)
        times = []
        started = time.perf_counter()
        for _ in range(calls):
            begin = time.perf_counter()
            comm.all_reduce(data)
            times.append(time.perf_counter() - begin)
        mean = (time.perf_counter() - started) / calls
        plan = registry.select("allreduce", size, "float32", world, comm.ranks_per_node, inplace=True)
        if rank == 0:
            record = {
                "rank": rank,
                "bytes": size,
                "median_s": statistics.median(times),
                "mean_s": mean,
                "plan": plan.name,
            }
            print("RESULT " + json.dumps(record), flush=True)


if __name__ == "__main__":
    main([int(size) for size in sys.argv[1].split(",")], int(sys.argv[2]))
