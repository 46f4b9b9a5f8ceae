"""Fusion rule 7: consecutive ``signal``s (``wait``s, ``flush``es) of one thread block -> one multi-channel op.

Two signals (or two waits, or two flushes) merge when they have the same ``relaxed`` and the same ``data_sync``, no
channel in common and channels of one type; the merged op lists the first op's channels, then the
second's. A chain folds into one op.

- Same channel twice: never merged. Two signals on one channel are two increments of the peer's
  semaphore (and two waits wait for two), which one op naming the channel once would not be.
- data_sync: the merged op keeps the common value. Apart, the two ops would also sync the block
  between them (the first's "after" and the second's "before" side), but no data op lies between
  them, so those syncs guard nothing; the union of what both ops guarded is exactly that value on
  the merged op. Ops with different values are not merged, nor ops with different ``relaxed``
  (a relaxed signal skips the fence the other one makes).
- Flushes: port channels only; the merged op waits for every channel's proxy work, each channel in
  its own thread, where two ops waited for one after the other (MSCCL++ merges them the same way).
- Channel types: memory and port channels signal differently (a store to the peer's semaphore vs a
  request to the proxy), so one op covers channels of one type.
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.passes.fuse_adjacent import channel_type, fuse_adjacent


def _fuse(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op not in ("signal", "wait", "flush") or second.op != first.op:
        return None
    if (first.relaxed, first.data_sync) != (second.relaxed, second.data_sync):
        return None
    channels = first.channels + second.channels
    if len(set(channels)) != len(channels) or len({channel_type(gpu, c) for c in channels}) != 1:
        return None
    return dataclasses.replace(first, channels=channels)


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse)
