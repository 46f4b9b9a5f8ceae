"""Fusion rule 5: ``read_reduce`` + ``put`` of its result -> ``read_reduce_send``.

As rule 4 for a reduction that reads peers' chunks over memory channels: when the put's ``src`` is
the reduction's ``dst``, one op reduces, keeps the result in ``dst`` and writes it to the put's
destinations (channels unchanged). The put may write back over the very chunks the reduction read
(an all-reduce sending the sum to the peers it read from): the fused op reads each element, then
writes it, in one thread; a put over shifted ranges keeps the two apart.
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.passes.fuse_adjacent import fuse_adjacent


def _fuse(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op != "read_reduce" or second.op != "put" or second.src != first.dst:
        return None
    return dataclasses.replace(first, op="read_reduce_send", dsts=list(second.dsts))


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse, pair_writes_fused=True)
