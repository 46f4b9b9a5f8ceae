"""Fusion rule 2: ``reduce_packet`` + ``copy_packet`` of its result -> ``reduce_copy_packet``.

When the copy's ``src`` is the reduction's ``dst`` (equal chunk range), one op reduces and packs the
result into local scratch as it goes: ``packet_dst`` is the copy's ``dst``; ``src``, ``srcs``, ``dst``
and ``reduce_op`` are the reduction's.
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.passes.fuse_adjacent import fuse_adjacent


def _fuse(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op != "reduce_packet" or second.op != "copy_packet" or second.src != first.dst:
        return None
    return dataclasses.replace(first, op="reduce_copy_packet", packet_dst=second.dst)


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse)
