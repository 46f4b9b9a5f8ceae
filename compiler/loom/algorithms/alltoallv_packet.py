"""All-to-all-v with LL packets, eagerly: small per-peer entries in one NVLink crossing, with no handshake.

Slot p of a rank's input is its send entry to rank p and slot q of its output its receive entry from rank
q, as in ``alltoallv_fullmesh``, whose three crossings per call (publish, put, signal) cost small messages
most of their time. Here, per peer p, on a thread block of its own, rank r sends its entry to p as packets
into its scratch slot on p (``slot(p, r)``) and unpacks the packets p sent into its own slot ``slot(r, p)``
into its receive entry from p. The rank's own entry is a local copy on the last thread block. No signal
and no wait: the packets' flags are the synchronisation. The LL scratch is double-buffered by call parity,
and reusing a half is safe because both directions of every pair run in every call (a zero-byte entry
still sends its count packet): a rank's call ends only once each peer's packets of that call arrived,
and the peer wrote them after it had finished reading the previous call's half.

Capacity: every scratch slot holds one entry of up to ``max_message_size`` bytes (64 KiB by default, at
most 1 MiB), a fixed region of the receiver's scratch. The executor leads each entry's packets with one
that carries its byte count, and the receiver checks that count against its own receive entry; neither
shows in the plan (docs/plan-format.md, "Call-sized slots"). The plan is all-to-all's through scratch with
its byte ranges read at run time, so the verifier's proof on symbolic entries holds for every count.

Parameters: ``world_size`` 2 to 8 on one node (memory channels only); ``instances`` (must be 1);
``inplace`` (must be False); ``name``; options ``min_message_size``, ``max_message_size`` (the capacity),
``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import full_mesh, peers, setup, slot
from loom.errors import InvalidArgumentError
from loom.language import AllToAllV, Buffer, CollectiveProgram, Rank

NAME = "alltoallv_packet"
# The executor keeps a region of the capacity per peer in each of two halves, and packets take twice the bytes
# they carry: 28 MiB of scratch per rank at 8 ranks and 1 MiB. Packets pay off for small entries only anyway.
MAX_CAPACITY_BYTES = 1 << 20


def build(
    world_size: int,
    ranks_per_node: int | None = None,
    *,
    instances: int = 1,
    inplace: bool = False,
    name: str | None = None,
    **options: Any,
) -> CollectiveProgram:
    if type(world_size) is int and type(ranks_per_node) is int and ranks_per_node != world_size:
        raise InvalidArgumentError(
            f"{NAME}: runs on one node only (ranks_per_node = world_size), got world_size {world_size} and"
            f" ranks_per_node {ranks_per_node}: its packets go over memory channels; across nodes use"
            " alltoallv_fullmesh"
        )
    s = setup(NAME, world_size, ranks_per_node, instances, inplace, name, options)
    if s.inplace:
        raise InvalidArgumentError(f"{NAME}: runs out of place only (an input entry may overlap an output entry)")
    if s.instances != 1:
        raise InvalidArgumentError(
            f"{NAME}: instances must be 1, got {s.instances}; an entry goes whole into one packet region of the"
            " peer's scratch, led by its count packet, so instances cannot split it"
        )
    capacity = s.options["max_message_size"]
    if capacity > MAX_CAPACITY_BYTES:
        raise InvalidArgumentError(
            f"{NAME}: max_message_size {capacity} is more than {MAX_CAPACITY_BYTES} bytes; it is the capacity of"
            " every packet region of the scratch (one per peer in each LL half): for larger entries use"
            " alltoallv_fullmesh"
        )
    n = s.world_size
    program = CollectiveProgram(s.name, AllToAllV(n, 1, False), n, **s.program_args())
    s.annotate(program)
    with program:
        scratch = [Buffer(r, n - 1) for r in range(n)]
        channels = full_mesh(s)
        for r in range(n):
            rank = Rank(r)
            source, output = rank.get_input_buffer(), rank.get_output_buffer()
            for tb, p in enumerate(peers(r, n)):
                channels[(r, p)].put_packets(scratch[p][slot(p, r) : slot(p, r) + 1], source[p : p + 1], tb=tb)
                rank.unpack_packets(output[p : p + 1], scratch[r][slot(r, p) : slot(r, p) + 1], tb=tb)
            rank.copy(output[r : r + 1], source[r : r + 1], tb=n - 1)
    return program
