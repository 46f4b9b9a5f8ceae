"""Reduce-scatter by reading peers' inputs, simple protocol: for large messages on one node (1 MiB to
1 GiB of input per rank by default).

Rank r reads piece r of every peer's input over NVLink and reduces it with piece r of its own input
straight into its output: one pass, no scratch, nothing written to a peer. (reducescatter_fullmesh
first puts each piece into the owner's scratch and reduces afterwards: two passes over the data.)
A handshake first tells each rank that its peers' kernels, and so their inputs, are ready; a second one
at the end keeps every rank's input untouched until its peers have finished reading it. With more than
two ranks the output is reduced into once per peer.

Layout: one thread block per rank; ``instances`` runs independent copies on parts of every piece.

Parameters: ``world_size`` 2 to 8 on one node (memory channels only: a port channel cannot read);
``instances``; ``inplace`` (the output is the rank's own piece of the input); ``name``; options
``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup
from loom.language import CollectiveProgram, Rank, ReduceScatter, SyncType

NAME = "reducescatter_read"


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
        channels = full_mesh(s)
        inputs = [Rank(r).get_input_buffer() for r in range(n)]
        for r in range(n):
            rank = Rank(r)
            for p in peers(r, n):
                channels[(r, p)].signal(tb=0, data_sync=SyncType.none, relaxed=True)
            for p in peers(r, n):
                channels[(r, p)].wait(tb=0, data_sync=SyncType.after, relaxed=True)
            output = rank.get_output_buffer()[0:1]
            source = inputs[r][r : r + 1]
            for p in peers(r, n):
                channels[(r, p)].reduce(source, [inputs[p][r : r + 1]], tb=0, local_dst_chunk=output)
                source = output
            for p in peers(r, n):
                channels[(r, p)].signal(tb=0, data_sync=SyncType.before)
            for p in peers(r, n):
                channels[(r, p)].wait(tb=0, data_sync=SyncType.after)
    return program
