"""All-reduce around a ring, simple protocol: for large messages on one node (1 MiB to 1 GiB by default),
where each link should carry one piece at a time (NCCL's large-message algorithm).

The input is cut into world_size pieces. Rank r sends to ``next = r + 1`` and receives from
``prev = r - 1`` (mod world_size).
0. Handshake: signal prev (this rank's scratch may be written), wait for next's signal.
1. Reduce-scatter, world_size - 1 steps: step s puts piece ``r - s`` (the input's at step 0, then the
   partial sum reduced in the step before) into slot s of next's scratch, signals next, waits for prev's
   piece ``r - s - 1`` and reduces it with the input's piece into the output. Rank r ends with piece
   ``r + 1`` complete.
2. All-gather, world_size - 1 steps: step s puts piece ``r + 1 - s`` into next's output, signals next,
   waits for prev's. No handshake between the phases: a rank reaches step 2 only after the ring's
   waits have passed through every step of next's that reads or writes the pieces step 2 writes there
   (the verifier checks it at every world size, in and out of place).
Each rank sends 2 x (world_size - 1) / world_size of the message, as allreduce_rs_ag does, but to one
peer only (on 4 H100s the full-mesh plans' bus bandwidth stayed near 305-335 GB/s from 64 MiB while
NCCL's ring rose to 354).

Layout: one thread block per rank; ``instances`` runs independent rings on parts of every piece.

Parameters: ``world_size`` 2 to 8 on one node; ``instances``; ``inplace``; ``name``; options
``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import ring, setup
from loom.language import AllReduce, Buffer, CollectiveProgram, Rank, SyncType

NAME = "allreduce_ring"


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
        # One slot per reduce-scatter step, so no slot is written twice in a call.
        scratch = [Buffer(r, n - 1) for r in range(n)]
        channels = ring(s)
        inputs = [Rank(r).get_input_buffer() for r in range(n)]
        # In place, input and output are one buffer; name it "input" throughout.
        results = inputs if s.inplace else [Rank(r).get_output_buffer() for r in range(n)]
        for r in range(n):
            rank = Rank(r)
            nxt, prev = channels[(r, (r + 1) % n)], channels[(r, (r - 1) % n)]
            following = (r + 1) % n
            prev.signal(tb=0, data_sync=SyncType.none, relaxed=True)
            nxt.wait(tb=0, data_sync=SyncType.after, relaxed=True)
            for step in range(n - 1):
                sent = (r - step) % n
                source = inputs[r] if step == 0 else results[r]
                nxt.put(scratch[following][step : step + 1], source[sent : sent + 1], tb=0)
                nxt.signal(tb=0, data_sync=SyncType.before)
                prev.wait(tb=0, data_sync=SyncType.after)
                received = (r - step - 1) % n
                rank.reduce(
                    inputs[r][received : received + 1],
                    [scratch[r][step : step + 1]],
                    tb=0,
                    dst_chunk=results[r][received : received + 1],
                )
            for step in range(n - 1):
                piece = (r + 1 - step) % n
                nxt.put(results[following][piece : piece + 1], results[r][piece : piece + 1], tb=0)
                nxt.signal(tb=0, data_sync=SyncType.before)
                prev.wait(tb=0, data_sync=SyncType.after)
    return program
