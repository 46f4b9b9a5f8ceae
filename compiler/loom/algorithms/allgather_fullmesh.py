"""All-gather over a full mesh, simple protocol: for large messages (1 MiB to 1 GiB per rank by default).

Every rank puts its input straight into its part of every peer's output: one step, no scratch.
Per peer: handshake (signal, then wait for the peer's signal: the peer has finished the previous
call and its output may be written), put, signal, wait for the peer's data. Out of place a rank
also copies its own input into its own part of the output. On 2 nodes, peers on the other node
are reached over port channels, which also ``flush`` before the final wait so that the proxy has
finished reading the input before the call ends.

Layout: thread block j serves the j-th peer; out of place, thread block world_size - 1 copies the rank's
own part meanwhile (on a block of its own the local copy overlaps the puts, rather than following one
of them: at 1 GiB on 2 ranks it is about an eighth of the time).

Parameters: ``world_size`` 2 to 8 on one node, or 2 nodes x 2 to 8 (``ranks_per_node =
world_size / 2``); ``instances``; ``inplace`` (the input is the rank's own part of the output);
``name``; options ``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup
from loom.language import AllGather, CollectiveProgram, PortChannel, Rank, SyncType

NAME = "allgather_fullmesh"


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
    program = CollectiveProgram(s.name, AllGather(n, 1, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        channels = full_mesh(s)
        for r in range(n):
            rank = Rank(r)
            output = rank.get_output_buffer()
            own = output[r : r + 1] if s.inplace else rank.get_input_buffer()[0:1]
            for tb, p in enumerate(peers(r, n)):
                channel = channels[(r, p)]
                channel.signal(tb=tb, data_sync=SyncType.none, relaxed=True)
                channel.wait(tb=tb, data_sync=SyncType.after, relaxed=True)
                channel.put(Rank(p).get_output_buffer()[r : r + 1], own, tb=tb)
                channel.signal(tb=tb, data_sync=SyncType.before)
                if isinstance(channel, PortChannel):
                    channel.flush(tb=tb)
                channel.wait(tb=tb, data_sync=SyncType.after)
            if not s.inplace:
                rank.copy(output[r : r + 1], own, tb=n - 1)
    return program
