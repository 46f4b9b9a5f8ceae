"""What each data op reads and writes (docs/plan-format.md, "Operations"): the verifier runs ops by it,
and the dependency pass tells packet reads from plain ones with it.

Per op: the operand fields it reads, the fields it writes, and whether it reduces its sources.
A field is ``(name, as packets)``: a packet read polls until the packets of the current call are
there; a packet write stores data with the call's flag; ``IN_SCRATCH``: packets where the reference is
into scratch, plain data elsewhere. ``srcs`` and ``dsts`` are lists (a send with
``srcs`` moves source i to destination i, PAIRED_SENDS); a
reference through a switch channel stands for the same range on every member of its group, so
``multimem_reduce`` reduces over the group and ``multimem_broadcast`` writes every member.
"""

from __future__ import annotations

# A packet op's own src or dst is packets when it lies in scratch and plain data elsewhere: what the executor
# does (executor/src/resolve.cc, emitDataPart), so a reduction's result kept in scratch is packets there.
IN_SCRATCH = "packets in scratch"


def as_packets(mode: bool | str, buffer: str) -> bool:
    """Whether a reference into ``buffer`` of a field read or written in ``mode`` (True, False, IN_SCRATCH) is an
    access of packets."""
    return mode is True or (mode == IN_SCRATCH and buffer == "scratch")


_PLAIN_SRC = (("src", False),)
DATA_OPS: dict[str, tuple[tuple, tuple, bool]] = {
    "copy": (_PLAIN_SRC, (("dst", False),), False),
    "get": (_PLAIN_SRC, (("dst", False),), False),
    "put": ((("src", False), ("srcs", False)), (("dsts", False),), False),
    "put_with_signal": (_PLAIN_SRC, (("dsts", False),), False),
    "put_with_signal_and_flush": (_PLAIN_SRC, (("dsts", False),), False),
    "reduce": ((("srcs", False),), (("dst", False),), True),
    "read_reduce": ((("srcs", False),), (("dst", False),), True),
    "reduce_send": ((("srcs", False),), (("dst", False), ("dsts", False)), True),
    "read_reduce_send": ((("srcs", False),), (("dst", False), ("dsts", False)), True),
    "put_packet": ((("src", IN_SCRATCH), ("srcs", False)), (("dsts", True),), False),
    "read_put_packet": ((("src", True), ("srcs", True)), (("dsts", True),), False),
    "copy_packet": ((("src", IN_SCRATCH),), (("dst", True),), False),
    "unpack_packet": ((("src", True),), (("dst", IN_SCRATCH),), False),
    "reduce_packet": ((("src", IN_SCRATCH), ("srcs", True)), (("dst", IN_SCRATCH),), True),
    "reduce_send_packet": ((("src", IN_SCRATCH), ("srcs", True)), (("dst", IN_SCRATCH), ("dsts", True)), True),
    "reduce_copy_packet": ((("src", IN_SCRATCH), ("srcs", True)), (("dst", IN_SCRATCH), ("packet_dst", True)), True),
    "reduce_copy_send_packet": (
        (("src", IN_SCRATCH), ("srcs", True)),
        (("dst", IN_SCRATCH), ("packet_dst", True), ("dsts", True)),
        True,
    ),
    "multimem_reduce": (_PLAIN_SRC, (("dst", False), ("dsts", False)), True),
    "multimem_broadcast": (_PLAIN_SRC, (("dsts", False),), False),
}

# Sends that take one source for every destination (``src``) or one per destination (``srcs``, paired
# with ``dsts`` in order: MSCCL++'s sends of several chunks to several peers in one op).
PAIRED_SENDS = frozenset({"put", "put_packet", "read_put_packet"})

# The fields of an op (plan JSON) that hold chunk references: one reference, or a list of them.
REF_FIELDS = ("src", "srcs", "dst", "packet_dst", "dsts")


def refs_of(op: dict, field: str) -> list[dict]:
    """The chunk references in one field of a plan-JSON op (none when it is absent)."""
    value = op.get(field)
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def longest_range(ops: list[dict]) -> int:
    """The most chunks any reference of the plan-JSON ops spans (0 without references): what a
    pipeline sized in bytes counts its iterations from."""
    return max((ref.get("count", 1) for op in ops for f in REF_FIELDS for ref in refs_of(op, f)), default=0)
