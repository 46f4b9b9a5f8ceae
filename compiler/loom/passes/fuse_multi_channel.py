"""Fusion rule 7: consecutive ``signal``s (``wait``s, ``flush``es) of one thread block -> one multi-channel op.

Two signals (or two waits, or two flushes) merge when they have the same ``relaxed``, no channel in
common and channels of one type; the merged op lists the first op's channels, then the second's. A
chain folds into one op.

- Same channel twice: never merged. Two signals on one channel are two increments of the peer's
  semaphore (and two waits wait for two), which one op naming the channel once would not be.
- data_sync: the merged op syncs the block before it if either op did, and after it if either op
  did. A "before" side orders the data ops before an op ahead of it, an "after" side the data ops
  after it behind it; no data op lies between the two, so on the merged op each side still orders
  every data op it did (equal values stay that value; MSCCL++'s flush "after" + flush "before"
  becomes "both"). Ops with different ``relaxed`` are not merged (a relaxed signal skips the fence
  the other one makes).
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
    if first.relaxed != second.relaxed or first.publish != second.publish:
        return None
    channels = first.channels + second.channels
    if len(set(channels)) != len(channels) or len({channel_type(gpu, c) for c in channels}) != 1:
        return None
    return dataclasses.replace(first, channels=channels, data_sync=_union(first.data_sync, second.data_sync))


def _union(a: str, b: str) -> str:
    """The data_sync that syncs on every side either value does."""
    before = a in ("before", "both") or b in ("before", "both")
    after = a in ("after", "both") or b in ("after", "both")
    return {(False, False): "none", (True, False): "before", (False, True): "after", (True, True): "both"}[
        (before, after)
    ]


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse)
