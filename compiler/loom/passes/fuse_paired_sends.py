"""Fusion rule 6a: sends of different sources become one op with a source per destination.

``put`` + ``put``, ``put_packet`` + ``put_packet`` and ``read_put_packet`` + ``read_put_packet`` whose
sources differ become one op of that kind with ``srcs`` paired with ``dsts`` in order (source i goes to
destination i; an op with one source for several destinations contributes it once per destination),
as MSCCL++ fuses the packet puts of different chunks to different peers. The executor runs the pairs
one after another, as it ran the separate ops. Not merged, as in rule 1: destinations on channels of
different types, and a destination already named. Runs after the reduce-and-send rules and
``fuse_put_signal``, which each take a put of one source and would find it merged away otherwise.
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.ir.effects import PAIRED_SENDS
from loom.passes.fuse_adjacent import channel_type, fuse_adjacent


def _sources(op: ir.Op) -> list[ir.ChunkRef]:
    """One source per destination."""
    return list(op.srcs) if op.srcs else [op.src] * len(op.dsts)


def _fuse(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op not in PAIRED_SENDS or second.op != first.op:
        return None
    dsts = first.dsts + second.dsts
    if len(set(dsts)) != len(dsts) or len({channel_type(gpu, ref) for ref in dsts}) != 1:
        return None
    srcs = _sources(first) + _sources(second)
    if len(set(srcs)) == 1:
        return None  # one source: rule 1's form (it ran first; this pair was kept apart for a reason)
    return dataclasses.replace(first, src=None, srcs=srcs, dsts=dsts)


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse)
