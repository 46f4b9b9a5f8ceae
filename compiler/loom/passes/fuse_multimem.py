"""Fusion rule 5a: ``multimem_reduce`` + ``multimem_broadcast`` of its result -> one ``multimem_reduce``
with ``dsts`` (MSCCL++'s ``glres``).

When the broadcast's ``src`` is the reduction's ``dst`` (equal chunk range), one op reduces the
multicast source over the group and stores the result to the broadcast's multicast destinations.
The local ``dst`` is dropped when a destination is that very range through a switch channel: the
multicast store writes every member's copy, this rank's included, so the local write would only
repeat it. Otherwise the fused op keeps ``dst`` and writes it too. The store may go back over the
very range the reduction read (each element is loaded-and-reduced, then stored, by one thread), so an
auto ``nop`` between the two goes as for a reduction chain.
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.passes.fuse_adjacent import channel_type, fuse_adjacent


def _fuse(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op != "multimem_reduce" or first.dsts or second.op != "multimem_broadcast" or second.src != first.dst:
        return None
    dst = first.dst
    covered = any(
        channel_type(gpu, ref) == "switch" and (ref.buffer, ref.index, ref.count) == (dst.buffer, dst.index, dst.count)
        for ref in second.dsts
    )
    return dataclasses.replace(first, dst=None if covered else dst, dsts=list(second.dsts))


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse, pair_writes_fused=True)
