"""Which library algorithm to run at which message size, for all-reduce, all-gather and reduce-scatter
(and all-to-all, in tables tuned since it is in the grid).

Per world size (ranks on one node) a table measured on GPUs, stored in tuned_sizes.json: for each
collective, one row per message-size range, with the algorithm, instance count and block size that
were fastest there in an --every-plan run of bench/collective_bench.py over candidates
(bench/tune_plans.py picks them and writes the file; docs/perf/executor.md). Ranges of one collective
do not overlap and cover 0 to 1 GiB, so a selector that takes the narrowest fitting range picks
exactly the table.

bench/tuned_plans.py compiles a table for the benchmark; plans/build_default_plans.py builds the
bundled default plans from them (for a world size without a table of its own, from the 2-rank one,
with scaled instance counts, untuned).
"""

from __future__ import annotations

import json
from pathlib import Path

TABLE_FILE = Path(__file__).with_name("tuned_sizes.json")

# (algorithm, smallest bytes, largest bytes, instances, threads per block)
Row = tuple[str, int, int, int, int]


def measured_tables() -> dict[int, list[Row]]:
    """{world size: its table} for every world size measured so far."""
    tables = json.loads(TABLE_FILE.read_text())
    return {int(world): [tuple(row) for row in entry["rows"]] for world, entry in tables.items()}


TUNED_WORLD_SIZE = 2  # the table every world size falls back to
TABLE: list[Row] = measured_tables()[TUNED_WORLD_SIZE]

# How much fewer instances than a 2-rank table's to run at a world size without a table of its own.
# A plan's size grows with instances x world_size x ops per rank (and ops per rank grow with
# world_size), so the counts come down fast enough to keep the bundled plans small (plans/default is
# ~20 MiB), while the bandwidth plans keep several thread blocks per rank (a full-mesh instance has
# world_size - 1).
INSTANCE_DIVISORS = {2: 1, 3: 2, 4: 4, 5: 4, 6: 8, 7: 8, 8: 8, 16: 32}


def scaled(rows: list[Row], world_size: int) -> list[Row]:
    """Rows written for 2 ranks, with the instance counts scaled down for ``world_size`` (untuned).
    Neighbouring ranges that scale to the same plan become one (one bundled plan, not several alike)."""
    merged: list[Row] = []
    for name, low, high, count, threads in rows:
        row = (name, low, high, max(1, count // instance_divisor(world_size)), threads)
        previous = merged[-1] if merged else None
        if previous and (previous[0], previous[3:]) == (name, row[3:]) and previous[2] + 1 == low:
            merged[-1] = (name, previous[1], high, *row[3:])
        else:
            merged.append(row)
    return merged


def instance_divisor(world_size: int) -> int:
    """INSTANCE_DIVISORS' value for ``world_size``, else that of the largest world size below it listed."""
    return INSTANCE_DIVISORS.get(world_size) or INSTANCE_DIVISORS[max(w for w in INSTANCE_DIVISORS if w <= world_size)]


def table_for(world_size: int) -> list[Row]:
    """The rows to run on one node of ``world_size`` ranks: its measured table, or the 2-rank one scaled."""
    return measured_tables().get(world_size) or scaled(TABLE, world_size)


KiB, GiB = 1 << 10, 1 << 30

# Across nodes, as TABLE where its algorithm runs across nodes; the all-reduce is the hierarchical
# one, and large reduce-scatters use the full mesh (reducescatter_read is one node only). Untuned:
# the boundaries are TABLE's, and instances are written for 2 ranks, as in TABLE, then scaled.
TWO_NODE_TABLE: list[Row] = [
    ("allreduce_hierarchical_packet", 0, 64 * KiB, 2, 512),  # one crossing of the link (issue 56)
    ("allreduce_hierarchical", 64 * KiB + 1, 512 * KiB, 8, 512),
    ("allreduce_hierarchical", 512 * KiB + 1, GiB, 64, 1024),
    ("allgather_fullmesh_packet", 0, 128 * KiB, 8, 512),
    ("allgather_fullmesh", 128 * KiB + 1, GiB, 64, 1024),
    ("reducescatter_fullmesh_packet", 0, 8 * KiB, 1, 256),
    ("reducescatter_fullmesh_packet", 8 * KiB + 1, 512 * KiB, 8, 512),
    ("reducescatter_fullmesh", 512 * KiB + 1, GiB, 64, 1024),
]

# Across nodes, where a TWO_NODE_TABLE algorithm does not run (more than 2 nodes, one GPU per node): the
# library algorithm that runs there instead, with the row's sizes and instances.
ACROSS_NODES_STAND_INS = {
    "allreduce_hierarchical": "allreduce_hierarchical_rs_ag",
    "allreduce_hierarchical_packet": "allreduce_hierarchical_rs_ag",
}

# One plan per shape for the whole size range the algorithm declares, where the table has no rows of
# the collective and the algorithm runs the shape, with these instances. Broadcast is bundled from root 0,
# the root nccl-tests and most jobs use; the JIT compiles the other roots' on first use.
WHOLE_RANGE = {"alltoall_fullmesh": 1, "broadcast": 1, "sendrecv": 1}

# Untuned rows of a collective the table has none of, where the algorithm runs the shape: (largest message,
# instances) per row, from 0 up. reduce_read (root 0 bundled, one node): the root reads the (n - 1) peers'
# inputs itself, so its bandwidth is the root's. With 4 thread blocks a 1 GiB reduce over 2 x H200 ran at
# 46 GB/s (23 ms, 2026-11-28) while up to 64 KiB it took 10.5-12.5 us; the large row's 32 blocks are a
# guess (read bandwidth grows with blocks in allreduce_read) until the tune measures them, and at 4 and 8
# ranks the root's reads of 3 and 7 messages stay behind a ring whatever the blocks.
SIZE_ROWS = {"reduce_read": ((64 * KiB, 4), (GiB, 32))}


def rows_for_shape(world_size: int, ranks_per_node: int) -> list[Row]:
    """Every plan to run on ``world_size`` ranks, ``ranks_per_node`` per node: the bundled set's rule
    (plans/build_default_plans.py), and what the JIT compiles for a shape with no bundled plans."""
    from loom.algorithms import ALGORITHMS  # the library imports this module

    one_node = world_size == ranks_per_node
    rows = table_for(world_size) if one_node else scaled(TWO_NODE_TABLE, world_size)
    if not one_node:
        shape = (world_size // ranks_per_node, ranks_per_node)
        rows = [
            (name if shape in ALGORITHMS[name].multi_node else ACROSS_NODES_STAND_INS.get(name, name), *sizes)
            for name, *sizes in rows
        ]
    tuned = {ALGORITHMS[row[0]].collective for row in rows}
    spans = {name: ((ALGORITHMS[name].max_message_bytes, instances),) for name, instances in WHOLE_RANGE.items()}
    for name, sized in (spans | SIZE_ROWS).items():
        algorithm = ALGORITHMS[name]
        if not one_node and (world_size // ranks_per_node, ranks_per_node) not in algorithm.multi_node:
            continue
        if algorithm.collective in tuned:  # the table's rows where it has them (all-to-all, once tuned)
            continue
        low = algorithm.min_message_bytes
        for high, instances in sized:
            rows.append((name, low, high, instances, 1024))
            low = high + 1
    return rows


__all__ = [
    "ACROSS_NODES_STAND_INS",
    "INSTANCE_DIVISORS",
    "TABLE",
    "TWO_NODE_TABLE",
    "SIZE_ROWS",
    "WHOLE_RANGE",
    "TABLE_FILE",
    "TUNED_WORLD_SIZE",
    "Row",
    "instance_divisor",
    "measured_tables",
    "rows_for_shape",
    "scaled",
    "table_for",
]
