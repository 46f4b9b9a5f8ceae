"""Fusion rule 3: a packet reduction followed by a packet send of its result.

- ``reduce_copy_packet`` + ``put_packet`` whose ``src`` is the reduction's ``dst``, or
  + ``read_put_packet`` whose ``src`` is its ``packet_dst`` (the packed result) ->
  ``reduce_copy_send_packet`` with the send's ``dsts``;
- ``reduce_packet`` + ``put_packet`` whose ``src`` is the reduction's ``dst`` -> ``reduce_send_packet``
  with the send's ``dsts``.

The destinations are the send's, unchanged (channels included). Run after the multi-destination
rule, so that a result sent to several peers goes out from one fused op.
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.passes.fuse_adjacent import fuse_adjacent


def _fuse(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> ir.Op | None:
    if first.op == "reduce_copy_packet":
        sends_result = (second.op == "put_packet" and second.src == first.dst) or (
            second.op == "read_put_packet" and second.src == first.packet_dst
        )
        if sends_result:
            return dataclasses.replace(first, op="reduce_copy_send_packet", dsts=list(second.dsts))
    if first.op == "reduce_packet" and second.op == "put_packet" and second.src == first.dst:
        return dataclasses.replace(first, op="reduce_send_packet", dsts=list(second.dsts))
    return None


def run(plan: ir.Plan) -> ir.Plan:
    return fuse_adjacent(plan, _fuse)
