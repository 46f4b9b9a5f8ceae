"""All-gather around a ring of port channels, simple protocol: for large messages on one node (1 MiB to
1 GiB per rank by default).

The ring of allgather_ring (see there), with every link a port channel: on one host a port channel's
put is a copy-engine copy that the host proxy issues, so the pieces cross NVLink without the SMs, and
``flush`` follows each put. A ring is the pattern in which the copy engines moved most on 4 H100s: one
stream per GPU to one peer, 372 GB/s, where SM stores reached at most 332 and Loom's SM ring 359
(bench/nvlink_ceiling.py, docs/perf/executor.md). ``instances`` runs independent rings on parts of
every piece, each with its own channels and so its own copy-engine stream.

Layout: thread block 0 runs the ring; out of place, thread block 1 copies the rank's own part meanwhile.

Parameters: ``world_size`` 2 to 8 on one node; ``instances``; ``inplace`` (the input is the rank's own
part of the output); ``name``; options ``min_message_size``, ``max_message_size``,
``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms import allgather_ring
from loom.algorithms._common import setup
from loom.language import CollectiveProgram

NAME = "allgather_ring_port"


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
    return allgather_ring.record(s, port_within_node=True)
