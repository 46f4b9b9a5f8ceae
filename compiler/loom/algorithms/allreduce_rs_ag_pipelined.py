"""All-reduce as reduce-scatter + all-gather, pipelined: for the largest messages (64 MiB to
1 GiB by default), one node.

The algorithm of allreduce_rs_ag (see there), with the reduce-scatter, reduction and all-gather
inside ``LoopIterationContext(iterations=N)``: each thread block runs them N times, iteration i on
the i-th of N slices of every piece. Smaller transfers per step keep scratch traffic in cache
and let ranks overlap one slice's reduction with the next slice's transfers. The handshake runs
once, before the pipeline: every iteration uses its own slice of scratch.

Parameters: ``world_size`` 2 to 8 on one node (``ranks_per_node`` None or equal); ``instances``,
``inplace``, ``name``; options ``iterations`` (1 to 1024, default 4), ``min_message_size``,
``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms import allreduce_rs_ag
from loom.algorithms._common import check_int_option, setup
from loom.language import CollectiveProgram

NAME = "allreduce_rs_ag_pipelined"


def build(
    world_size: int,
    ranks_per_node: int | None = None,
    *,
    instances: int = 1,
    inplace: bool = False,
    name: str | None = None,
    **options: Any,
) -> CollectiveProgram:
    s = setup(NAME, world_size, ranks_per_node, instances, inplace, name, options)
    iterations = check_int_option(s, "iterations", 1, 1024)
    return allreduce_rs_ag.record(s, iterations=iterations)
