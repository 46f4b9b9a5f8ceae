"""Which library algorithm to run at which message size, for all-reduce, all-gather and reduce-scatter.

For each collective, one row per message-size range, with the algorithm, instance count and block
size that were fastest there on 2 x H200 (an --every-plan run of bench/collective_bench.py over
candidates; docs/perf/executor.md). Ranges of one collective do not overlap and cover 0 to 1 GiB, so
a selector that takes the narrowest fitting range picks exactly this table.

bench/tuned_plans.py compiles it for the benchmark; plans/build_default_plans.py builds the bundled
default plans from it (scaling the instance counts for more ranks, untuned).
"""

from __future__ import annotations

from loom.algorithms import GiB, KiB, MiB

TUNED_WORLD_SIZE = 2  # the table was measured with this many ranks on one node

# (algorithm, smallest bytes, largest bytes, instances, threads per block)
TABLE: list[tuple[str, int, int, int, int]] = [
    ("allreduce_allpairs_packet", 0, 32 * KiB, 4, 512),
    ("allreduce_allpairs_packet", 32 * KiB + 1, 512 * KiB, 8, 512),
    ("allreduce_rs_ag", 512 * KiB + 1, 64 * MiB, 64, 1024),
    ("allreduce_rs_ag_pipelined", 64 * MiB + 1, GiB, 64, 1024),
    ("allgather_fullmesh_packet", 0, 128 * KiB, 8, 512),
    ("allgather_fullmesh", 128 * KiB + 1, GiB, 64, 1024),
    ("reducescatter_fullmesh_packet", 0, 8 * KiB, 1, 256),
    ("reducescatter_fullmesh_packet", 8 * KiB + 1, 512 * KiB, 8, 512),
    ("reducescatter_read", 512 * KiB + 1, GiB, 64, 1024),
]

__all__ = ["TABLE", "TUNED_WORLD_SIZE"]
