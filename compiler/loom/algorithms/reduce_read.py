"""Reduce to a root by reading, simple protocol: any message size on one node (up to 1 GiB by default).

1. Every non-root rank signals the root (relaxed): its kernel runs, so its input is ready, and it has
   finished the previous call.
2. The root waits for every peer, then reads every peer's input over NVLink and reduces them with its
   own input into its output in one pass (the per-peer reductions written below fuse into one
   read_reduce with world_size sources). Nothing is written to a peer, and no rank but the root writes
   its output: a non-root rank's output may be any buffer (NCCL's ncclReduce lets it pass its input).
3. The root signals every peer that it has finished reading, and every non-root rank waits for that
   before its call ends, so that it cannot change its input while the root still reads it.

In place (the root's input is its output) the first read reduces into the root's input itself.

Layout: one thread block per rank; ``instances`` runs independent copies on parts of the message (on
the root, one thread block per instance).

Parameters: ``world_size`` 2 to 8 on one node (memory channels only: a port channel cannot read);
``instances``; ``inplace``; ``name``; options ``root`` (default 0), ``min_message_size``,
``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import check_int_option, peer_channel, peers, setup
from loom.language import CollectiveProgram, Rank, Reduce, SyncType

NAME = "reduce_read"


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
    program = CollectiveProgram(s.name, Reduce(n, 1, s.inplace, root), n, **s.program_args())
    s.annotate(program)
    with program:
        # Channels between the root and each peer only: the non-root ranks never talk to each other.
        channels = {}
        for p in peers(root, n):
            channels[(root, p)] = peer_channel(s, p, root)
            channels[(p, root)] = peer_channel(s, root, p)
        inputs = [Rank(r).get_input_buffer() for r in range(n)]
        # In place, the root's input and output are one buffer; name it "input".
        result = inputs[root][0:1] if s.inplace else Rank(root).get_output_buffer()[0:1]
        for p in peers(root, n):
            channels[(p, root)].signal(tb=0, data_sync=SyncType.none, relaxed=True)
        for p in peers(root, n):
            channels[(root, p)].wait(tb=0, data_sync=SyncType.after, relaxed=True)
        source = inputs[root][0:1]
        for p in peers(root, n):
            channels[(root, p)].reduce(source, [inputs[p][0:1]], tb=0, local_dst_chunk=result)
            source = result
        for p in peers(root, n):
            channels[(root, p)].signal(tb=0, data_sync=SyncType.before)
        for p in peers(root, n):
            channels[(p, root)].wait(tb=0, data_sync=SyncType.after)
    return program
