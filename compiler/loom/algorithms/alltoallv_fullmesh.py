"""All-to-all-v over a full mesh, simple protocol: per-peer sizes given with each call.

Slot p of a rank's input is its send entry to rank p and slot r of its output its receive entry from
rank r, each an (offset, bytes) pair of the call's table (docs/executor.md, "counted plans"); with
``instances`` each instance takes its share of every entry over channels of its own. Per peer p, on a
thread block of its own: publish this rank's receive entry from p into p's mailbox and signal (p may now
write into this rank's output: the previous call's result has been read), wait for p's own publishing
signal, put the send entry to p into p's output where p's entry says, signal, and wait for p's data. A
zero-byte entry takes the same handshake, so both sides stay in step. The rank's own entry is a local
copy on the last thread block. Out of place only. Peers on other nodes are reached over port channels: the
proxy carries the published entry (with the signal, in one trigger) and the data, and the lane flushes
before its last wait, so that the input may be reused once the call is done.

The plan is all-to-all's with its byte ranges read at run time, so its postcondition is all-to-all's, and
the verifier's proof holds for every count: no op depends on the sizes, only on the entries.

Parameters: ``world_size`` 2 to 8 on one node, or 2 or more nodes of 1 to 8 ranks; ``instances``,
``inplace`` (must be False), ``name``; options ``min_message_size``, ``max_message_size``,
``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup
from loom.errors import InvalidArgumentError
from loom.language import AllToAllV, CollectiveProgram, PortChannel, Rank, SyncType

NAME = "alltoallv_fullmesh"


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
    if s.inplace:
        raise InvalidArgumentError(f"{NAME}: runs out of place only (an input entry may overlap an output entry)")
    n = s.world_size
    program = CollectiveProgram(s.name, AllToAllV(n, 1, False), n, **s.program_args())
    s.annotate(program)
    with program:
        channels = full_mesh(s)
        for r in range(n):
            rank = Rank(r)
            source, output = rank.get_input_buffer(), rank.get_output_buffer()
            for tb, p in enumerate(peers(r, n)):
                channel = channels[(r, p)]
                channel.signal(tb=tb, data_sync=SyncType.none, publish=True)
                channel.wait(tb=tb, data_sync=SyncType.after)
                channel.put(Rank(p).get_output_buffer()[r : r + 1], source[p : p + 1], tb=tb)
                channel.signal(tb=tb, data_sync=SyncType.before)
                if isinstance(channel, PortChannel):
                    channel.flush(tb=tb)
                channel.wait(tb=tb, data_sync=SyncType.after)
            rank.copy(output[r : r + 1], source[r : r + 1], tb=n - 1)
    return program
