"""Fusion rule 1: two sends of one source become one op with several destinations.

``put`` + ``put``, ``put_packet`` + ``put_packet`` and ``read_put_packet`` + ``read_put_packet`` with
the same ``src`` (equal chunk range) become one op of that kind whose ``dsts`` are the first op's
followed by the second's; a chain of such sends folds into one op. Not merged: destinations on
channels of different types (memory and port data move differently, so the executor runs them as
different ops), and a destination the first op already names (a second write of the same chunk is
kept as the author wrote it).
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.passes.fuse_adjacent import channel_type, fuse_adjacent

_SENDS = frozenset({"put", "put_packet", "read_put_packet"})


def _fuse(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op not in _SENDS or second.op != first.op or first.src is None or first.src != second.src:
        return None
    dsts = first.dsts + second.dsts
    if len(set(dsts)) != len(dsts) or len({channel_type(gpu, ref) for ref in dsts}) != 1:
        return None
    return dataclasses.replace(first, dsts=dsts)


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse)
