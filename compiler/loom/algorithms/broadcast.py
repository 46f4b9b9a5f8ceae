"""Broadcast from a root, simple protocol: any message size (up to 1 GiB by default).

Every non-root rank signals the root that its output may be written (it has finished the
previous call) and waits for the data; the root waits for each peer's signal, puts its input into
the peer's output and signals it. Out of place the root also copies its input into its own
output. On 2 nodes, peers on the other node are reached over port channels, which ``flush`` so
that the proxy has finished reading the root's input before the call ends.

Layout: on the root, thread block j serves the j-th peer (thread block 0 also copies); on the
other ranks, one thread block.

Parameters: ``world_size`` 2 to 8 on one node, or 2 nodes x 2 to 8 (``ranks_per_node =
world_size / 2``); ``instances``, ``inplace``, ``name``; options ``root`` (default 0),
``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import check_int_option, full_mesh, peers, setup
from loom.language import Broadcast, CollectiveProgram, PortChannel, Rank, SyncType

NAME = "broadcast"


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
    n = s.world_size
    root = check_int_option(s, "root", 0, n - 1)
    program = CollectiveProgram(s.name, Broadcast(n, 1, s.inplace, root), n, **s.program_args())
    s.annotate(program)
    with program:
        channels = full_mesh(s)
        data = Rank(root).get_input_buffer()[0:1]
        for tb, p in enumerate(peers(root, n)):
            channel = channels[(root, p)]
            channel.wait(tb=tb, data_sync=SyncType.after, relaxed=True)
            channel.put(Rank(p).get_output_buffer()[0:1], data, tb=tb)
            channel.signal(tb=tb, data_sync=SyncType.before)
            if isinstance(channel, PortChannel):
                channel.flush(tb=tb)
        if not s.inplace:
            Rank(root).copy(Rank(root).get_output_buffer()[0:1], data, tb=0)
        for p in peers(root, n):
            channels[(p, root)].signal(tb=0, data_sync=SyncType.none, relaxed=True)
            channels[(p, root)].wait(tb=0, data_sync=SyncType.after)
    return program
