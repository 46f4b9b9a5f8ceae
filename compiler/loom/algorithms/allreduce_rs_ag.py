"""All-reduce as reduce-scatter + all-gather over memory channels, simple protocol: for large
messages (1 MiB to 64 MiB by default), one node.

The input is cut into world_size pieces; rank r owns piece r.

0. Handshake: signal every peer, wait for every peer (relaxed). A peer's handshake signal says it
   has finished the previous call, so its scratch and output may be written again.
1. Reduce-scatter: rank r puts piece p of its input into its slot of rank p's scratch; signal/wait.
2. Rank r reduces piece r of its input with the world_size - 1 slots of its scratch into its output.
3. All-gather: rank r puts its reduced piece into piece r of every peer's output; signal/wait. The
   final wait also keeps every rank in the call until its whole output has arrived.

Each rank sends 2 x (world_size - 1) / world_size of the message, the bandwidth optimum. One
thread block per rank and instance; raise ``instances`` for parallelism (each instance works on
its own part of every piece, with its own channels). allreduce_rs_ag_pipelined runs steps 1-3 in
a pipeline over slices of the pieces.

Parameters: ``world_size`` 2 to 8 on one node (``ranks_per_node`` None or equal); ``instances``,
``inplace``, ``name``; options ``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

import contextlib
from typing import Any

from loom.algorithms._common import Setup, full_mesh, peers, setup, slot
from loom.language import AllReduce, Buffer, CollectiveProgram, LoopIterationContext, Rank, SyncType

NAME = "allreduce_rs_ag"


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
    return record(s, iterations=None)


def record(s: Setup, iterations: int | None) -> CollectiveProgram:
    """Record the program; with ``iterations``, steps 1-3 form a pipeline of that many iterations."""
    n = s.world_size
    program = CollectiveProgram(s.name, AllReduce(n, 1, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        scratch = [Buffer(r, n - 1) for r in range(n)]
        channels = full_mesh(s)
        # In place, input and output are one buffer; name it "input" throughout.
        results = [Rank(r).get_input_buffer() if s.inplace else Rank(r).get_output_buffer() for r in range(n)]
        for r in range(n):
            for p in peers(r, n):
                channels[(r, p)].signal(tb=0, data_sync=SyncType.none, relaxed=True)
            for p in peers(r, n):
                channels[(r, p)].wait(tb=0, data_sync=SyncType.after, relaxed=True)
        loop = LoopIterationContext(iterations=iterations) if iterations else contextlib.nullcontext()
        with loop:
            for r in range(n):
                rank = Rank(r)
                source = rank.get_input_buffer()
                for p in peers(r, n):
                    channels[(r, p)].put(scratch[p][slot(p, r) : slot(p, r) + 1], source[p : p + 1], tb=0)
                for p in peers(r, n):
                    channels[(r, p)].signal(tb=0, data_sync=SyncType.before)
                for p in peers(r, n):
                    channels[(r, p)].wait(tb=0, data_sync=SyncType.after)
                received = [scratch[r][slot(r, p) : slot(r, p) + 1] for p in peers(r, n)]
                rank.reduce(source[r : r + 1], received, tb=0, dst_chunk=results[r][r : r + 1])
                for p in peers(r, n):
                    channels[(r, p)].put(results[p][r : r + 1], results[r][r : r + 1], tb=0)
                for p in peers(r, n):
                    channels[(r, p)].signal(tb=0, data_sync=SyncType.before)
                for p in peers(r, n):
                    channels[(r, p)].wait(tb=0, data_sync=SyncType.after)
    return program
