"""All-reduce, one shot, LL packets: for small messages (up to 256 KiB by default), one node.

Every rank sends its whole input as LL packets into a per-sender slot of every peer's scratch,
then reduces its input with the packets of all peers into its output. One step of latency and
no signal/wait at all: the reduction polls the packet flags, and the executor double-buffers LL
scratch so the next call never overwrites packets a slow peer has not read yet. Each rank sends
(world_size - 1) x the message, so the algorithm is for latency-bound sizes.

Layout: the input is cut into world_size chunks; thread block i handles chunk i: it packs chunk i
to every peer, then reduces chunk i. Rank r keeps the packets from peer p in scratch slot
``slot(r, p)`` (world_size - 1 slots of world_size chunks each).

Parameters: ``world_size`` 2 to 8, ``ranks_per_node`` must equal it (one node); ``instances``
replicates the program over disjoint parts of every chunk; ``inplace`` makes input and output
one buffer; ``name`` defaults to ``allreduce_allpairs_packet_<n>r``; options
``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup, slot
from loom.language import AllReduce, Buffer, CollectiveProgram, Rank

NAME = "allreduce_allpairs_packet"


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
    program = CollectiveProgram(s.name, AllReduce(n, 1, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        scratch = [Buffer(r, (n - 1) * n) for r in range(n)]
        channels = full_mesh(s)
        for r in range(n):
            rank = Rank(r)
            source = rank.get_input_buffer()
            result = source if s.inplace else rank.get_output_buffer()
            for i in range(n):
                # Thread block i: chunk i goes to every peer as packets, then chunk i is reduced.
                for p in peers(r, n):
                    at = slot(p, r) * n + i
                    channels[(r, p)].put_packets(scratch[p][at : at + 1], source[i : i + 1], tb=i)
                received = [scratch[r][slot(r, p) * n + i : slot(r, p) * n + i + 1] for p in peers(r, n)]
                rank.reduce(source[i : i + 1], received, tb=i, dst_chunk=result[i : i + 1], packet=True)
    return program
