"""All-to-all by reading peers' inputs, simple protocol: for large messages on one node (1 MiB to 1 GiB
per rank by default).

The input and output are cut into world_size pieces; rank r's output piece p receives rank p's input
piece r. Per peer p: handshake (the peer's kernel runs, so its input is ready, and it has finished the
previous call), read piece r of p's input, signal (done reading p's input), wait (p is done reading
this rank's). Out of place the read lands in output piece p and a rank copies its own piece locally.
In place the input is the output and p reads piece p while this rank would overwrite it, so the read
lands in this rank's scratch and is copied into place after the wait. The reading counterpart of
alltoall_fullmesh (on 4 H100s the reading reduce-scatter kept pace with NCCL where the writing
all-to-all fell behind, so both directions are candidates).

Layout: thread block j reads from the j-th peer; out of place, thread block world_size - 1 copies the
rank's own piece meanwhile.

Parameters: ``world_size`` 2 to 8 on one node (memory channels only: a port channel cannot read);
``instances``, ``inplace``, ``name``; options ``min_message_size``, ``max_message_size``,
``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup, slot
from loom.language import AllToAll, Buffer, CollectiveProgram, Rank, SyncType

NAME = "alltoall_read"


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
    program = CollectiveProgram(s.name, AllToAll(n, 1, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        scratch = [Buffer(r, n - 1) for r in range(n)] if s.inplace else None
        channels = full_mesh(s)
        inputs = [Rank(r).get_input_buffer() for r in range(n)]
        for r in range(n):
            rank = Rank(r)
            output = rank.get_output_buffer()
            for tb, p in enumerate(peers(r, n)):
                channel = channels[(r, p)]
                channel.signal(tb=tb, data_sync=SyncType.none, relaxed=True)
                channel.wait(tb=tb, data_sync=SyncType.after, relaxed=True)
                landing = scratch[r][slot(r, p) : slot(r, p) + 1] if s.inplace else output[p : p + 1]
                channel.get(landing, inputs[p][r : r + 1], tb=tb)
                channel.signal(tb=tb, data_sync=SyncType.before)
                channel.wait(tb=tb, data_sync=SyncType.after)
                if s.inplace:
                    rank.copy(output[p : p + 1], landing, tb=tb)
            if not s.inplace:  # in place, the own piece already is where it belongs
                rank.copy(output[r : r + 1], inputs[r][r : r + 1], tb=n - 1)
    return program
