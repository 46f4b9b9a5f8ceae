"""Reduce-scatter over a full mesh with LL packets: for small messages (up to 1 MiB of input per
rank by default).

Rank r sends piece p of its input as packets into its slot of rank p's scratch; rank p reduces
piece p of its input with the packets of all peers into its output (the reduction polls the
packet flags). No signal/wait; LL scratch is double-buffered between calls. On 2 nodes, peers on
the other node get the packets over port channels.

Layout: thread block j sends to the j-th peer; thread block 0 also runs the reduction.

Parameters: ``world_size`` 2 to 8 on one node, or 2 nodes x 2 to 8 (``ranks_per_node =
world_size / 2``); ``instances``; ``inplace`` (the output is the rank's own piece of the input,
the MSCCL++ convention); ``name``; options ``min_message_size``, ``max_message_size``,
``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup, slot
from loom.language import Buffer, CollectiveProgram, Rank, ReduceScatter

NAME = "reducescatter_fullmesh_packet"


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
            for tb, p in enumerate(peers(r, n)):
                channels[(r, p)].put_packets(scratch[p][slot(p, r) : slot(p, r) + 1], source[p : p + 1], tb=tb)
            received = [scratch[r][slot(r, p) : slot(r, p) + 1] for p in peers(r, n)]
            output = rank.get_output_buffer()[0:1]
            rank.reduce(source[r : r + 1], received, tb=0, dst_chunk=output, packet=True)
    return program
