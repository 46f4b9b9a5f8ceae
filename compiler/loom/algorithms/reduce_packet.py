"""Reduce to a root, one shot, LL packets: for small messages (up to 256 KiB by default), one node.

Every non-root rank sends its whole input as LL packets into its own slot of the root's scratch; the
root reduces its input with every peer's packets into its output, polling the packet flags: one step
of latency for the root. Each of the root's thread blocks then signals every peer that it has read its
packets, and a peer's call ends when it has heard from all of them: the executor double-buffers LL
scratch, but a peer never waits for packets itself, so without that word it could run two calls ahead
and overwrite packets the root has not read. No rank but the root writes its output.

Layout: the input is cut into world_size chunks; thread block i handles chunk i: on a peer it packs
chunk i to the root, on the root it reduces chunk i. The root keeps the packets of peer p in scratch
slot ``slot(root, p)`` (world_size - 1 slots of world_size chunks each).

Parameters: ``world_size`` 2 to 8, ``ranks_per_node`` must equal it (one node); ``instances``
replicates the program over disjoint parts of every chunk; ``inplace``; ``name``; options ``root``
(default 0), ``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import check_int_option, peer_channel, peers, setup, slot
from loom.language import Buffer, CollectiveProgram, Rank, Reduce, SyncType

NAME = "reduce_packet"


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
    program = CollectiveProgram(s.name, Reduce(n, n, s.inplace, root), n, **s.program_args())
    s.annotate(program)
    with program:
        scratch = Buffer(root, (n - 1) * n)
        to_root = {p: peer_channel(s, root, p) for p in peers(root, n)}  # at rank p
        from_root = {p: peer_channel(s, p, root) for p in peers(root, n)}  # at the root
        for p in peers(root, n):
            source = Rank(p).get_input_buffer()
            for i in range(n):
                at = slot(root, p) * n + i
                to_root[p].put_packets(scratch[at : at + 1], source[i : i + 1], tb=i)
            # The root's word that it has read this call's packets: a peer may then fill that LL half again
            # two calls later (nothing else holds a peer back, as it never waits for packets itself).
            for _ in range(n):
                to_root[p].wait(tb=0, data_sync=SyncType.none)
        rank = Rank(root)
        source = rank.get_input_buffer()
        result = source if s.inplace else rank.get_output_buffer()
        for i in range(n):
            received = [scratch[slot(root, p) * n + i : slot(root, p) * n + i + 1] for p in peers(root, n)]
            rank.reduce(source[i : i + 1], received, tb=i, dst_chunk=result[i : i + 1], packet=True)
            for p in peers(root, n):
                from_root[p].signal(tb=i, data_sync=SyncType.before)
    return program
