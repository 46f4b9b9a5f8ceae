"""All-reduce by reading only, simple protocol: for large messages on one node (1 MiB to 1 GiB by default).

The input is cut into world_size pieces; rank r owns piece r.
0. Handshake: signal every peer, wait for every peer (relaxed). A peer's signal says its kernel runs
   (its input is ready) and it has finished the previous call (it no longer reads this rank's buffers).
1. Reduce-scatter by reading: rank r reads piece r of every peer's input over NVLink and reduces it
   with its own piece r into piece r of its output; signal every peer, wait for every peer.
2. All-gather by reading: rank r reads piece p of every peer p's output into its own output. In place
   this overwrites pieces that peers read in step 1: the waits of step 1 have seen them finish.
3. Signal every peer, wait for every peer: each rank keeps its piece until its peers have read it.
Each rank moves 2 x (world_size - 1) / world_size of the message over NVLink, as allreduce_rs_ag does,
but by loads instead of stores and with no scratch (on 4 H100s the reading reduce-scatter kept pace
with NCCL where the writing all-gather and all-reduce fell behind, so both directions are candidates).

Layout: one thread block per rank; ``instances`` runs independent copies on parts of every piece.

Parameters: ``world_size`` 2 to 8 on one node (memory channels only: a port channel cannot read);
``instances``; ``inplace``; ``name``; options ``min_message_size``, ``max_message_size``,
``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup
from loom.language import AllReduce, CollectiveProgram, Rank, SyncType

NAME = "allreduce_read"


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
        channels = full_mesh(s)
        inputs = [Rank(r).get_input_buffer() for r in range(n)]
        # In place, input and output are one buffer; name it "input" throughout.
        results = inputs if s.inplace else [Rank(r).get_output_buffer() for r in range(n)]

        def handshake(r: int, relaxed: bool) -> None:
            for p in peers(r, n):
                channels[(r, p)].signal(tb=0, data_sync=SyncType.none if relaxed else SyncType.before, relaxed=relaxed)
            for p in peers(r, n):
                channels[(r, p)].wait(tb=0, data_sync=SyncType.after, relaxed=relaxed)

        for r in range(n):
            handshake(r, relaxed=True)
            source = inputs[r][r : r + 1]
            for p in peers(r, n):
                channels[(r, p)].reduce(source, [inputs[p][r : r + 1]], tb=0, local_dst_chunk=results[r][r : r + 1])
                source = results[r][r : r + 1]
            handshake(r, relaxed=False)
            for p in peers(r, n):
                channels[(r, p)].get(results[r][p : p + 1], results[p][p : p + 1], tb=0)
            handshake(r, relaxed=False)
    return program
