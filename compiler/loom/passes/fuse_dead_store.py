"""Fusion rule 0: a data op whose result the next op overwrites unread -> dropped.

``copy``, ``get``, ``reduce`` or ``read_reduce`` into a local chunk range, followed in the same thread
block by one of these ops that writes exactly that range again without reading it, leaves nothing
behind: no op reads the first result before the second replaces it (the two are adjacent, and a
thread block or peer reading it in between without a sync would race). The first op goes. MSCCL++'s
op tests write such pairs (two identical gets; two reductions into one output chunk, which MSCCL++
fuses into one reduction over all sources, changing the result, where dropping the first keeps it).

- Only ops that write nothing but their local ``dst``: no remote destinations, no packets (a packet
  write also carries a flag a peer may poll).
- The second must write the very same range (in an in-place plan: the same memory under either
  name) and must not read any of it, or it would read the first op's result.
"""

from __future__ import annotations

import functools

from loom.ir import model as ir
from loom.passes.fuse_adjacent import Names, chunk_names, fuse_adjacent

_LOCAL_ONLY = frozenset({"copy", "get", "reduce", "read_reduce"})


def _fuse(plan: ir.Plan, gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op not in _LOCAL_ONLY or second.op not in _LOCAL_ONLY:
        return None
    if first.dst is None or first.dst.is_remote or second.dst is None or second.dst.is_remote:
        return None
    names: Names = chunk_names(plan, gpu)
    written = names(first.dst)
    if names(second.dst) != written:
        return None
    if any(set(written) & set(names(ref)) for ref in second.local_reads()):
        return None
    return second


def run(plan: ir.Plan) -> ir.Plan:
    # The pair overlaps only in the range both write, which the first then no longer does.
    return fuse_adjacent(plan, functools.partial(_fuse, plan), pair_writes_fused=True)
