"""How each op of the plan vocabulary is written in plan assembly; asm and disasm share these tables.

Data ops are a chain, ``OP [REDUCE_OP] SOURCES -> STAGE [-> STAGE ...]``: the sources fill the
op's source fields in order, each stage after an arrow fills the next destination field. A list
field (``srcs``, ``dsts``) takes every remaining reference of its place, at least one. The chain
reads as the data flows: ``reduce_copy_send_packet sum input[3], scratch[6] -> output[3] ->
scratch[3] -> ch0:scratch[3]`` reduces into ``output[3]``, packs the result into ``scratch[3]``
and sends the packets to the peer's ``scratch[3]``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChainShape:
    """Fields of a data op: the sources before the first arrow, and the accepted stage layouts."""

    reduces: bool
    sources: tuple[str, ...]
    stages: tuple[tuple[str, ...], ...]  # alternatives: one field per stage, fewest stages first
    paired: bool = False  # a send: several sources are one per destination (srcs), in order

    def sources_of(self, count: int) -> tuple[str, ...]:
        """The source fields for ``count`` source references (a paired send with several takes srcs)."""
        return ("srcs",) if self.paired and count > 1 else self.sources

    def usage(self, name: str) -> str:
        """The op's form(s), e.g. 'reduce_send OP SRCS -> DSTS' or '... -> DST -> DSTS'."""
        head = name + (" OP" if self.reduces else "")
        sources = ", ".join(_FIELD_WORDS[field] for field in self.sources)
        forms = [" -> ".join([f"{head} {sources}", *(_FIELD_WORDS[f] for f in stages)]) for stages in self.stages]
        if self.paired:
            forms.append(f"{head} SRCS -> DSTS (source i to destination i)")
        return " or ".join(forms)


LIST_FIELDS = frozenset({"srcs", "dsts"})
_FIELD_WORDS = {"src": "SRC", "srcs": "SRCS", "dst": "DST", "packet_dst": "PACKET_DST", "dsts": "DSTS"}

_SRC_TO_DST = ChainShape(False, ("src",), (("dst",),))
_SRC_TO_DSTS = ChainShape(False, ("src",), (("dsts",),))
_SEND = ChainShape(False, ("src",), (("dsts",),), paired=True)
_REDUCE = ChainShape(True, ("srcs",), (("dst",),))
_REDUCE_SEND = ChainShape(True, ("srcs",), (("dsts",), ("dst", "dsts")))

CHAIN_OPS: dict[str, ChainShape] = {
    "copy": _SRC_TO_DST,
    "get": _SRC_TO_DST,
    "copy_packet": _SRC_TO_DST,
    "unpack_packet": _SRC_TO_DST,
    "put": _SEND,
    "put_with_signal": _SRC_TO_DSTS,
    "put_with_signal_and_flush": _SRC_TO_DSTS,
    "put_packet": _SEND,
    "read_put_packet": _SEND,
    "multimem_broadcast": _SRC_TO_DSTS,
    "reduce": _REDUCE,
    "read_reduce": _REDUCE,
    "reduce_send": _REDUCE_SEND,
    "read_reduce_send": _REDUCE_SEND,
    # A local chunk, multicast chunks, or both (the fused reduce + broadcast); one stage is told by its chunks.
    "multimem_reduce": ChainShape(True, ("src",), (("dst",), ("dsts",), ("dst", "dsts"))),
    "reduce_packet": ChainShape(True, ("src", "srcs"), (("dst",),)),
    "reduce_send_packet": ChainShape(True, ("src", "srcs"), (("dst", "dsts"),)),
    "reduce_copy_packet": ChainShape(True, ("src", "srcs"), (("dst", "packet_dst"),)),
    "reduce_copy_send_packet": ChainShape(True, ("src", "srcs"), (("dst", "packet_dst", "dsts"),)),
}

# Ops over a list of ids: the JSON field that holds the ids, the text prefix of one id, and the
# optional flags the op takes.
ID_LIST_OPS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "signal": ("channels", "ch", ("relaxed", "publish", "data_sync")),
    "wait": ("channels", "ch", ("relaxed", "data_sync")),
    "flush": ("channels", "ch", ("data_sync",)),
    "sem_acquire": ("semaphores", "sem", ("data_sync",)),
    "sem_release": ("semaphores", "sem", ("data_sync",)),
}

OTHER_OPS = ("barrier", "nop", "pipeline")
ALL_OPS = (*CHAIN_OPS, *ID_LIST_OPS, *OTHER_OPS)
