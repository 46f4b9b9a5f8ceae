"""All-gather over a full mesh with LL packets: for small messages (up to 1 MiB per rank by default).

Every rank sends its input as packets into its slot of every peer's scratch, and unpacks the
packets each peer sent it into that peer's part of its output; out of place it also copies its
own input into its own part. No signal/wait: packets carry their flags and LL scratch is
double-buffered between calls. On 2 nodes, peers on the other node get the packets over port
channels (the proxy copies the packets; the receiver still polls their flags).

Layout: thread block j sends to and unpacks from the j-th peer; thread block 0 also copies the
rank's own part. Rank r keeps peer p's packets in scratch slot ``slot(r, p)``.

Parameters: ``world_size`` 2 to 8 on one node, or 2 nodes x 2 to 8 (``ranks_per_node =
world_size / 2``); ``instances``; ``inplace`` (the input is the rank's own part of the output);
``name``; options ``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup, slot
from loom.language import AllGather, Buffer, CollectiveProgram, Rank

NAME = "allgather_fullmesh_packet"


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
        scratch = [Buffer(r, n - 1) for r in range(n)]
        channels = full_mesh(s)
        for r in range(n):
            rank = Rank(r)
            output = rank.get_output_buffer()
            own = output[r : r + 1] if s.inplace else rank.get_input_buffer()[0:1]
            for tb, p in enumerate(peers(r, n)):
                channels[(r, p)].put_packets(scratch[p][slot(p, r) : slot(p, r) + 1], own, tb=tb)
            if not s.inplace:
                rank.copy(output[r : r + 1], own, tb=0)
            for tb, p in enumerate(peers(r, n)):
                rank.unpack_packets(output[p : p + 1], scratch[r][slot(r, p) : slot(r, p) + 1], tb=tb)
    return program
