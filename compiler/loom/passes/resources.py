"""Resource assignment: channels paired in both directions, scratch sized to its use, ids in order.

Plans pair the i-th channel of rank a to rank b with the i-th channel of b to a. A program that
only declares one direction (say, puts from 0 to 1 with no traffic back) gets the missing reverse
channels added, unused, so both ends connect.
"""

from __future__ import annotations

from collections import Counter

from loom.ir import model as ir


def _pair_channels(plan: ir.Plan) -> None:
    counts = Counter((gpu.id, c.peer, c.type) for gpu in plan.gpus for c in gpu.channels if c.type != "switch")
    for (rank, peer, kind), mine in sorted(counts.items()):
        missing = mine - counts[(peer, rank, kind)]
        target = plan.gpu(peer)
        for _ in range(missing):
            next_id = max((c.id for c in target.channels), default=-1) + 1
            target.channels.append(ir.Channel(next_id, kind, peer=rank))
        counts[(peer, rank, kind)] = max(mine, counts[(peer, rank, kind)])


def _scratch_use(plan: ir.Plan) -> dict[int, int]:
    use = {gpu.id: 0 for gpu in plan.gpus}

    def visit(gpu: ir.Gpu, op: ir.Op) -> None:
        for ref in op.refs():
            if ref.buffer != "scratch":
                continue
            channel = gpu.channel(ref.channel) if ref.is_remote else None
            owners = [gpu.id] if channel is None else channel.ranks if channel.type == "switch" else [channel.peer]
            for owner in owners:
                use[owner] = max(use[owner], ref.stop)
        for inner in op.body:
            visit(gpu, inner)

    for gpu, _, op in plan.all_ops():
        visit(gpu, op)
    return use


def run(plan: ir.Plan) -> ir.Plan:
    _pair_channels(plan)
    for gpu, used in _scratch_use(plan).items():
        target = plan.gpu(gpu)
        target.scratch_chunks = max(target.scratch_chunks, used)
    for gpu in plan.gpus:
        gpu.channels.sort(key=lambda c: c.id)
        gpu.semaphores.sort(key=lambda s: s.id)
        gpu.threadblocks = [tb for tb in sorted(gpu.threadblocks, key=lambda t: t.id) if tb.ops]
    return plan
