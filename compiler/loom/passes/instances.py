"""Instance replication: run N copies of the program side by side on disjoint shares of the data.

Every slot of every buffer (see ir/shapes.py) is cut into N contiguous parts; instance j works on
part j, with its own thread blocks, channels, semaphores and barriers (id -> id x N + j), so the
copies never touch the same chunk and never share a sync. A range that crosses a slot boundary
is split into one op per slot, because its parts are no longer contiguous.
"""

from __future__ import annotations

import dataclasses

from loom.ir import model as ir
from loom.ir.shapes import buffer_slots


class _Mapper:
    def __init__(self, plan: ir.Plan, gpu: ir.Gpu, count: int) -> None:
        self.count = count
        self.per_slot = {}
        for buffer in ("input", "output", "scratch"):
            slots = buffer_slots(plan.collective, buffer, plan.world_size)
            self.per_slot[buffer] = (gpu.chunks(buffer) // slots) if slots else 0
        self.gpu = gpu
        self.plan = plan

    def slot_size(self, ref: ir.ChunkRef) -> int:
        channel = self.gpu.channel(ref.channel) if ref.is_remote else None
        if channel is not None and channel.type != "switch":
            target = self.plan.gpu(channel.peer)
            slots = buffer_slots(self.plan.collective, ref.buffer, self.plan.world_size)
            return max(1, target.chunks(ref.buffer) // slots)
        return max(1, self.per_slot[ref.buffer])

    def cuts(self, op: ir.Op) -> list[int]:
        """Offsets inside the op's ranges where one of them crosses a slot boundary."""
        points = set()
        for ref in op.refs():
            size = self.slot_size(ref)
            first = (ref.index // size + 1) * size
            points.update(boundary - ref.index for boundary in range(first, ref.stop, size))
        return sorted(points)

    def ref(self, ref: ir.ChunkRef, instance: int) -> ir.ChunkRef:
        size = self.slot_size(ref)
        slot, piece = divmod(ref.index, size)
        channel = None if ref.channel is None else ref.channel * self.count + instance
        return ir.ChunkRef(ref.buffer, (slot * self.count + instance) * size + piece, ref.count, channel)

    def op(self, op: ir.Op, instance: int) -> list[ir.Op]:
        if op.op == "pipeline":
            body = [piece for inner in op.body for piece in self.op(inner, instance)]
            return [dataclasses.replace(op, body=body)]
        pieces = [op]
        if op.refs():
            bounds = [0, *self.cuts(op), op.refs()[0].count]
            pieces = [
                op.map_refs(lambda r, lo=lo, hi=hi: r.with_range(r.index + lo, hi - lo))
                for lo, hi in zip(bounds, bounds[1:], strict=False)
            ]
        n, j = self.count, instance
        return [
            dataclasses.replace(
                piece.map_refs(lambda r: self.ref(r, j)),
                channels=[c * n + j for c in piece.channels],
                semaphores=[s * n + j for s in piece.semaphores],
                threadblocks=[t * n + j for t in piece.threadblocks],
                barrier_id=None if piece.barrier_id is None else piece.barrier_id * n + j,
            )
            for piece in pieces
        ]


def run(plan: ir.Plan, count: int) -> ir.Plan:
    if count == 1:
        return plan
    mappers = {gpu.id: _Mapper(plan, gpu, count) for gpu in plan.gpus}
    for gpu in plan.gpus:
        mapper = mappers[gpu.id]
        blocks = []
        for tb in gpu.threadblocks:
            for j in range(count):
                ops = [piece for op in tb.ops for piece in mapper.op(op, j)]
                blocks.append(ir.ThreadBlock(tb.id * count + j, ops))
        gpu.threadblocks = sorted(blocks, key=lambda t: t.id)
        gpu.channels = [dataclasses.replace(c, id=c.id * count + j) for c in gpu.channels for j in range(count)]
        gpu.semaphores = [ir.Semaphore(s.id * count + j, s.initial_value) for s in gpu.semaphores for j in range(count)]
    for gpu in plan.gpus:
        gpu.input_chunks *= count
        gpu.output_chunks *= count
        gpu.scratch_chunks *= count
    return plan
