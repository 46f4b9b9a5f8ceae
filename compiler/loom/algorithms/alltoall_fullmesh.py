"""All-to-all over a full mesh, simple protocol: any message size (up to 1 GiB per rank by default).

The input and output are cut into world_size pieces; rank q's output piece r receives rank r's
input piece q. Per peer p: handshake (the peer has finished the previous call), put input piece p
into piece r of p's output, signal, wait for p's piece. Out of place a rank copies its own piece
locally. In place the input is the output, and piece p may not be overwritten while this rank
still sends it, so the pieces go through the peer's scratch instead and each rank copies the
received piece into place after the wait. On 2 nodes, peers on the other node are reached over port
channels, which ``flush`` before the final wait.

Layout: thread block j serves the j-th peer; out of place, thread block world_size - 1 copies the rank's
own piece meanwhile (as in allgather_fullmesh: on a block of its own the local copy overlaps the puts
rather than following the first of them; at 2 ranks the own piece is half of what a rank moves).

Parameters: ``world_size`` 2 to 8 on one node, or 2 nodes x 2 to 8 (``ranks_per_node =
world_size / 2``); ``instances``, ``inplace``, ``name``; options ``min_message_size``,
``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup, slot
from loom.language import AllToAll, Buffer, CollectiveProgram, PortChannel, Rank, SyncType

NAME = "alltoall_fullmesh"


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
    program = CollectiveProgram(s.name, AllToAll(n, 1, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        scratch = [Buffer(r, n - 1) for r in range(n)] if s.inplace else None
        channels = full_mesh(s)
        for r in range(n):
            rank = Rank(r)
            source, output = rank.get_input_buffer(), rank.get_output_buffer()
            for tb, p in enumerate(peers(r, n)):
                channel = channels[(r, p)]
                channel.signal(tb=tb, data_sync=SyncType.none, relaxed=True)
                channel.wait(tb=tb, data_sync=SyncType.after, relaxed=True)
                if s.inplace:
                    channel.put(scratch[p][slot(p, r) : slot(p, r) + 1], source[p : p + 1], tb=tb)
                else:
                    channel.put(Rank(p).get_output_buffer()[r : r + 1], source[p : p + 1], tb=tb)
                channel.signal(tb=tb, data_sync=SyncType.before)
                if isinstance(channel, PortChannel):
                    channel.flush(tb=tb)
                channel.wait(tb=tb, data_sync=SyncType.after)
                if s.inplace:
                    rank.copy(output[p : p + 1], scratch[r][slot(r, p) : slot(r, p) + 1], tb=tb)
            if not s.inplace:  # in place, the own piece already is where it belongs
                rank.copy(output[r : r + 1], source[r : r + 1], tb=n - 1)
    return program
