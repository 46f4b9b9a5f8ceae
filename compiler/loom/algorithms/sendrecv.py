"""Send/receive around a ring, simple protocol: any message size (up to 1 GiB by default).

Rank r sends its input to ``next = r + 1`` and receives ``prev = r - 1``'s (mod world_size). It
signals prev that its buffer may be written (it has finished the previous call), waits for next's
signal, puts its input into next's output, signals next, and waits for prev's data. In place the
input is the output and may not be overwritten while this rank still sends it, so the data goes
into next's scratch and each rank copies it into place after the wait. On 2 nodes the ring
crosses between the nodes over port channels, which ``flush`` after the put.

Layout: one thread block per rank; ``instances`` runs independent copies on parts of the message.

Parameters: ``world_size`` 2 to 8 on one node, or 2 nodes x 2 to 8 (``ranks_per_node =
world_size / 2``); ``instances``, ``inplace``, ``name``; options ``min_message_size``,
``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import peer_channel, setup
from loom.language import Buffer, CollectiveProgram, PortChannel, Rank, SendRecv, SyncType

NAME = "sendrecv"


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
    program = CollectiveProgram(s.name, SendRecv(n, 1, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        scratch = [Buffer(r, 1) for r in range(n)] if s.inplace else None
        # One channel per neighbour pair and direction; with 2 ranks, next and prev are one channel.
        channels = {}
        for r in range(n):
            for p in sorted({(r + 1) % n, (r - 1) % n}):
                channels[(r, p)] = peer_channel(s, p, r)
        for r in range(n):
            rank = Rank(r)
            after = (r + 1) % n
            nxt, prev = channels[(r, after)], channels[(r, (r - 1) % n)]
            prev.signal(tb=0, data_sync=SyncType.none, relaxed=True)
            nxt.wait(tb=0, data_sync=SyncType.after, relaxed=True)
            target = scratch[after][0:1] if s.inplace else Rank(after).get_output_buffer()[0:1]
            nxt.put(target, rank.get_input_buffer()[0:1], tb=0)
            nxt.signal(tb=0, data_sync=SyncType.before)
            if isinstance(nxt, PortChannel):
                nxt.flush(tb=0)
            prev.wait(tb=0, data_sync=SyncType.after)
            if s.inplace:
                rank.copy(rank.get_output_buffer()[0:1], scratch[r][0:1], tb=0)
    return program
