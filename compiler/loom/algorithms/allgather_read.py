"""All-gather by reading peers' inputs, simple protocol: for large messages on one node (1 MiB to 1 GiB
per rank by default).

Every rank reads each peer's input over NVLink straight into its own output: one step, no scratch,
nothing written to a peer (allgather_fullmesh writes the same bytes the other way round; on 4 H100s
the reading reduce-scatter kept pace with NCCL where the writing all-gather and all-to-all fell
behind, so both directions are candidates). Per peer: handshake (signal, then wait for the peer's
signal: the peer's kernel runs, so its input is ready), get, signal, wait. The final handshake keeps
every rank's input untouched until its peers have finished reading it.

Layout: thread block j reads from the j-th peer; out of place, thread block world_size - 1 copies the
rank's own part meanwhile.

Parameters: ``world_size`` 2 to 8 on one node (memory channels only: a port channel cannot read);
``instances``; ``inplace`` (the input is the rank's own part of the output); ``name``; options
``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup
from loom.language import AllGather, CollectiveProgram, Rank, SyncType

NAME = "allgather_read"


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
        channels = full_mesh(s)
        # A rank's own part: its input, or in place the part of its output that holds it.
        owns = [
            Rank(r).get_output_buffer()[r : r + 1] if s.inplace else Rank(r).get_input_buffer()[0:1] for r in range(n)
        ]
        for r in range(n):
            output = Rank(r).get_output_buffer()
            for tb, p in enumerate(peers(r, n)):
                channel = channels[(r, p)]
                channel.signal(tb=tb, data_sync=SyncType.none, relaxed=True)
                channel.wait(tb=tb, data_sync=SyncType.after, relaxed=True)
                channel.get(output[p : p + 1], owns[p], tb=tb)
                channel.signal(tb=tb, data_sync=SyncType.before)
                channel.wait(tb=tb, data_sync=SyncType.after)
            if not s.inplace:
                Rank(r).copy(output[r : r + 1], owns[r], tb=n - 1)
    return program
