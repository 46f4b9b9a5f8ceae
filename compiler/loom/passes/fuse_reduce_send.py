"""Fusion rule 4: ``reduce`` + ``put`` of its result -> ``reduce_send``.

When the put's ``src`` is the reduction's ``dst`` (equal chunk range), one op reduces, keeps the
result in ``dst`` and writes it to every destination. The destinations are the put's, unchanged:
the fused op sends over the put's channels, so a put over a port channel gives a ``reduce_send``
to that port channel and a put over a memory channel one to that memory channel.
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.passes.fuse_adjacent import fuse_adjacent


def _fuse(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op != "reduce" or second.op != "put" or second.src != first.dst:
        return None
    return dataclasses.replace(first, op="reduce_send", dsts=list(second.dsts))


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse)
