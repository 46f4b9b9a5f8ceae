"""All-gather around a ring, simple protocol: for large messages (1 MiB to 1 GiB per rank by
default), where each link should carry one piece at a time.

Rank r sends to ``next = r + 1`` and receives from ``prev = r - 1`` (mod world_size). After a
handshake (signal prev: "my output may be written"; wait for next's signal), step s = 0 ..
world_size - 2 puts piece ``(r - s) mod world_size`` (its own input at step 0, then the piece
received in the step before) into next's output, signals next, and waits for prev's piece. Every
link carries world_size - 1 pieces, one per step. On 2 nodes the ring crosses between the nodes
twice over port channels, which ``flush`` after each put.

Layout: thread block 0 runs the ring; out of place, thread block 1 copies the rank's own part meanwhile.
``instances`` runs independent rings on parts of every piece.

Parameters: ``world_size`` 2 to 8 on one node, or 2 nodes x 2 to 8 (``ranks_per_node =
world_size / 2``); ``instances``; ``inplace`` (the input is the rank's own part of the output);
``name``; options ``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import Setup, ring, setup
from loom.language import AllGather, CollectiveProgram, PortChannel, Rank, SyncType

NAME = "allgather_ring"


def build(
    world_size: int,
    ranks_per_node: int | None = None,
    *,
    instances: int = 1,
    inplace: bool = False,
    name: str | None = None,
    **options: Any,
) -> CollectiveProgram:
    return record(setup(NAME, world_size, ranks_per_node, instances, inplace, name, options))


def record(s: Setup, port_within_node: bool = False) -> CollectiveProgram:
    """The ring of checked arguments ``s``; ``port_within_node`` makes every link a port channel
    (allgather_ring_port: copy-engine copies between GPUs of one host)."""
    n = s.world_size
    program = CollectiveProgram(s.name, AllGather(n, 1, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        channels = ring(s, port_within_node)
        for r in range(n):
            rank = Rank(r)
            output = rank.get_output_buffer()
            nxt, prev = channels[(r, (r + 1) % n)], channels[(r, (r - 1) % n)]
            next_output = Rank((r + 1) % n).get_output_buffer()
            prev.signal(tb=0, data_sync=SyncType.none, relaxed=True)
            nxt.wait(tb=0, data_sync=SyncType.after, relaxed=True)
            if not s.inplace:
                # On a block of its own, so that the local copy overlaps the ring instead of preceding it.
                rank.copy(output[r : r + 1], rank.get_input_buffer()[0:1], tb=1)
            for step in range(n - 1):
                piece = (r - step) % n
                source = rank.get_input_buffer()[0:1] if step == 0 and not s.inplace else output[piece : piece + 1]
                nxt.put(next_output[piece : piece + 1], source, tb=0)
                nxt.signal(tb=0, data_sync=SyncType.before)
                if isinstance(nxt, PortChannel):
                    nxt.flush(tb=0)
                prev.wait(tb=0, data_sync=SyncType.after)
    return program
