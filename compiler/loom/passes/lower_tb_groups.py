"""Lower thread-block groups: cut every chunk finely enough that each member of a group gets a
whole number of chunks, then give each member its contiguous share of its op's ranges."""

from __future__ import annotations

import dataclasses
import math

from loom.ir import model as ir


def _ops(plan: ir.Plan):
    for _, _, op in plan.all_ops():
        yield op
        yield from op.body


def run(plan: ir.Plan) -> ir.Plan:
    sizes = {op.tb_group[1] for op in _ops(plan) if op.tb_group}
    if not sizes:
        return plan
    factor = math.lcm(*sizes)
    for gpu in plan.gpus:
        gpu.input_chunks *= factor
        gpu.output_chunks *= factor
        gpu.scratch_chunks *= factor
        for tb in gpu.threadblocks:
            tb.ops = [_refine(op, factor) for op in tb.ops]
    return plan


def _refine(op: ir.Op, factor: int) -> ir.Op:
    member, size = op.tb_group or (0, 1)

    def share(ref: ir.ChunkRef) -> ir.ChunkRef:
        length = ref.count * factor // size
        return ref.with_range(ref.index * factor + member * length, length)

    refined = (
        op.map_refs(share)
        if not op.body
        else dataclasses.replace(op, body=[_refine(inner, factor) for inner in op.body])
    )
    return dataclasses.replace(refined, tb_group=None)
