"""Fusion rule 6: ``put`` + ``signal`` (+ ``flush``) on one port channel -> one proxy request.

- ``put`` with exactly one destination, on port channel c, + ``signal`` with channels [c] ->
  ``put_with_signal``;
- ``put_with_signal`` (one destination on port channel c) + ``flush`` with channels [c] ->
  ``put_with_signal_and_flush``.

Memory channels have no fused form: their puts are stores by the block's own threads.

data_sync: the fused ops have no ``data_sync`` field and synchronise as the default, ``both``; that
includes whatever the signal or flush asked for, so any value fuses (the result syncs at least as
much). A ``relaxed`` signal does not fuse: the fused signal always fences, and ``relaxed`` says the
author meant a signal that guards no data, which a signal fused to a put would.
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.passes.fuse_adjacent import channel_type, fuse_adjacent


def _port_channel(gpu: ir.Gpu, op: ir.Op) -> int | None:
    """The port channel of a one-destination send; None for anything else."""
    if len(op.dsts) != 1 or channel_type(gpu, op.dsts[0]) != "port":
        return None
    return op.dsts[0].channel


def _fuse(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op not in ("put", "put_with_signal"):
        return None
    channel = _port_channel(gpu, first)
    if channel is None or second.channels != [channel]:
        return None
    if first.op == "put" and second.op == "signal" and not second.relaxed and not second.publish:
        return dataclasses.replace(first, op="put_with_signal")
    if first.op == "put_with_signal" and second.op == "flush":
        return dataclasses.replace(first, op="put_with_signal_and_flush")
    return None


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse)
