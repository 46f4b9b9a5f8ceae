"""Fusion rule 4a: a chain of reductions into one chunk -> one reduction over all their sources.

``read_reduce`` (or ``reduce``) of ``[a...] -> x`` followed by the same op kind and operator of
``[x, b...] -> x`` becomes ``[a..., b...] -> x``: the second folds more sources into what the
first left in ``x``, so one op reads every source once and writes ``x`` once (MSCCL++ fuses the
read-reduces of an all-reduce over several peers this way). The order of the additions is the same;
the sum is rounded to the data type once instead of after each op. The first op may start from ``x``
itself (``[x, a...] -> x``) or from other chunks (an out-of-place reduction whose first step reads
the input and writes the output).

- The second must accumulate into the first's result: its first source and both destinations are the
  same range, and no other source of the second is that range (which would add it twice).
- Sources the first already reads may appear again in the second (a peer's chunk reduced twice stays
  reduced twice: the fused op lists it twice).
- ``reduce_packet`` is not chained: its packet sources are waited for one by one, which a fused op
  would do in one pass anyway, but it has no such accumulation pattern in practice.
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.passes.fuse_adjacent import fuse_adjacent

_CHAINED = ("read_reduce", "reduce")


def _fuse(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op not in _CHAINED or second.op != first.op or second.reduce_op != first.reduce_op:
        return None
    if first.dst is None or second.dst != first.dst or not second.srcs or second.srcs[0] != first.dst:
        return None
    if not first.srcs or first.dst in second.srcs[1:]:
        return None
    return dataclasses.replace(first, srcs=list(first.srcs) + list(second.srcs[1:]))


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse, pair_writes_fused=True)
