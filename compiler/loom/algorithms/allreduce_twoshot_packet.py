"""All-reduce in two shots with LL packets: for small to medium messages (256 KiB to 1 MiB by default), one node.

1. Reduce-scatter: rank r sends piece p of its input as packets into its slot of rank p's scratch.
2. Rank r reduces its own piece r with the packets of all peers (the reduction polls the packets).
3. All-gather: rank r sends the reduced piece r as packets into its slot of every peer's scratch;
   every rank unpacks the pieces it receives into place.

Each rank sends 2 x (world_size - 1) / world_size of the message instead of the one-shot
algorithm's (world_size - 1) x, at the cost of a second packet hop. No signal/wait: packets carry
their own flags, and the executor double-buffers LL scratch between calls.

Layout: thread block j sends to and unpacks from the j-th peer; the reduction of piece r and the
sends of its result are split over all world_size - 1 thread blocks (a ThreadBlockGroup), each
reducing and sending its own share. Rank r's scratch: world_size - 1 reduce-scatter slots, then
world_size - 1 all-gather slots, one per peer.

Parameters: ``world_size`` 2 to 8 on one node (``ranks_per_node`` None or equal); ``instances``,
``inplace``, ``name``; options ``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup, slot
from loom.language import AllReduce, Buffer, CollectiveProgram, Rank, ThreadBlockGroup

NAME = "allreduce_twoshot_packet"


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
        scratch = [Buffer(r, 2 * (n - 1)) for r in range(n)]
        gathered = n - 1  # where the all-gather slots start in scratch
        channels = full_mesh(s)
        group = ThreadBlockGroup(list(range(n - 1)))
        for r in range(n):
            rank = Rank(r)
            source = rank.get_input_buffer()
            result = source if s.inplace else rank.get_output_buffer()
            for tb, p in enumerate(peers(r, n)):
                channels[(r, p)].put_packets(scratch[p][slot(p, r) : slot(p, r) + 1], source[p : p + 1], tb=tb)
            received = [scratch[r][slot(r, p) : slot(r, p) + 1] for p in peers(r, n)]
            rank.reduce(source[r : r + 1], received, tb_group=group, dst_chunk=result[r : r + 1], packet=True)
            for p in peers(r, n):
                at = gathered + slot(p, r)
                channels[(r, p)].put_packets(scratch[p][at : at + 1], result[r : r + 1], tb_group=group)
            for tb, p in enumerate(peers(r, n)):
                at = gathered + slot(r, p)
                rank.unpack_packets(result[p : p + 1], scratch[r][at : at + 1], tb=tb)
    return program
