"""Zero-copy all-reduce, simple protocol, one node: no scratch, each byte crosses NVLink once each way;
for medium messages (1 MiB to 64 MiB of input per rank by default; the bundled plans keep
allreduce_rs_ag there until both are timed on GPUs).

Rank r reads piece r of every peer's input over NVLink, reduces it with piece r of its own input, and
writes the result into piece r of its own output and of every peer's output. A handshake first
tells each rank that its peers' kernels, and so their inputs and outputs, are ready; a second one at
the end keeps every rank's input untouched and its output unread until its peers are done with them.
The reads and the writes fuse into one ``read_reduce_send`` per thread block (each element is read
from every rank, reduced, and written to every rank in one pass), as MSCCL++'s single-node
all-reduce does. In place, piece p of a rank's buffer is read and then overwritten by rank p alone.

Layout: one thread block per rank; ``instances`` runs independent copies on parts of every piece.

Parameters: ``world_size`` 2 to 8 on one node (memory channels: a port channel cannot read);
``instances``; ``inplace``; ``name``; options ``min_message_size``, ``max_message_size``,
``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup
from loom.language import AllReduce, CollectiveProgram, Rank, SyncType

NAME = "allreduce_zero_copy"


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
        outputs = [Rank(r).get_output_buffer() for r in range(n)]
        for r in range(n):
            for p in peers(r, n):
                channels[(r, p)].signal(tb=0, data_sync=SyncType.none, relaxed=True)
            for p in peers(r, n):
                channels[(r, p)].wait(tb=0, data_sync=SyncType.after, relaxed=True)
            mine = outputs[r][r : r + 1]
            source = inputs[r][r : r + 1]
            for p in peers(r, n):
                channels[(r, p)].reduce(source, [inputs[p][r : r + 1]], tb=0, local_dst_chunk=mine)
                source = mine
            for p in peers(r, n):
                channels[(r, p)].put(outputs[p][r : r + 1], mine, tb=0)
            for p in peers(r, n):
                channels[(r, p)].signal(tb=0, data_sync=SyncType.before)
            for p in peers(r, n):
                channels[(r, p)].wait(tb=0, data_sync=SyncType.after)
    return program
