"""Reduce-scatter over a full mesh, simple protocol: for large messages (1 MiB to 1 GiB of input
per rank by default).

The input is cut into world_size pieces; rank p ends with the reduction of piece p. After a
handshake with every peer (its scratch may be written), rank r puts piece p of its input into its
slot of rank p's scratch, signals every peer, waits for every peer's piece, and reduces piece r of
its input with its world_size - 1 scratch slots into its output. On 2 nodes, peers on the other
node are reached over port channels, which ``flush`` after the put so that the proxy has finished
reading the input before the call ends.

Layout: one thread block per rank (the reduction needs every peer's data); ``instances`` runs
independent copies on parts of every piece.

Parameters: ``world_size`` 2 to 8 on one node, or 2 nodes x 2 to 8 (``ranks_per_node =
world_size / 2``); ``instances``; ``inplace`` (the output is the rank's own piece of the input,
the MSCCL++ convention); ``name``; options ``min_message_size``, ``max_message_size``,
``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup, slot
from loom.language import Buffer, CollectiveProgram, PortChannel, Rank, ReduceScatter, SyncType

NAME = "reducescatter_fullmesh"


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
    program = CollectiveProgram(s.name, ReduceScatter(n, 1, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        scratch = [Buffer(r, n - 1) for r in range(n)]
        channels = full_mesh(s)
        for r in range(n):
            rank = Rank(r)
            source = rank.get_input_buffer()
            for p in peers(r, n):
                channels[(r, p)].signal(tb=0, data_sync=SyncType.none, relaxed=True)
            for p in peers(r, n):
                channels[(r, p)].wait(tb=0, data_sync=SyncType.after, relaxed=True)
            for p in peers(r, n):
                channels[(r, p)].put(scratch[p][slot(p, r) : slot(p, r) + 1], source[p : p + 1], tb=0)
            for p in peers(r, n):
                channels[(r, p)].signal(tb=0, data_sync=SyncType.before)
            for p in peers(r, n):
                if isinstance(channels[(r, p)], PortChannel):
                    channels[(r, p)].flush(tb=0)
            for p in peers(r, n):
                channels[(r, p)].wait(tb=0, data_sync=SyncType.after)
            received = [scratch[r][slot(r, p) : slot(r, p) + 1] for p in peers(r, n)]
            rank.reduce(source[r : r + 1], received, tb=0, dst_chunk=rank.get_output_buffer()[0:1])
    return program
