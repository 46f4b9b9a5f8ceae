"""Plan JSON (as a dict) to IR and back. Defaults are dropped on the way out, so that a plan
written by any tool comes back in one normal form."""

from __future__ import annotations

from typing import Any

from loom.ir.model import Channel, ChunkRef, Gpu, Op, Plan, Semaphore, SourceLoc, ThreadBlock
from loom.plan.canonical import PLAN_KEYS

# The header fields the IR keeps as they are: the plan's keys from its name to its alignment, in the
# canonical order (format_version, reuse_scratch, root, metadata and gpus have handling of their own).
_HEADER = PLAN_KEYS[PLAN_KEYS.index("name") : PLAN_KEYS.index("alignment_bytes") + 1]


def _ref_in(data: dict) -> ChunkRef:
    return ChunkRef(data["buffer"], data["index"], data.get("count", 1), data.get("channel"))


def _ref_out(ref: ChunkRef) -> dict:
    out: dict[str, Any] = {}
    if ref.channel is not None:
        out["channel"] = ref.channel
    out["buffer"] = ref.buffer
    out["index"] = ref.index
    if ref.count != 1:
        out["count"] = ref.count
    return out


def op_from_dict(data: dict) -> Op:
    loc = data.get("loc")
    return Op(
        op=data["op"],
        src=_ref_in(data["src"]) if "src" in data else None,
        srcs=[_ref_in(r) for r in data.get("srcs", [])],
        dst=_ref_in(data["dst"]) if "dst" in data else None,
        packet_dst=_ref_in(data["packet_dst"]) if "packet_dst" in data else None,
        dsts=[_ref_in(r) for r in data.get("dsts", [])],
        channels=list(data.get("channels", [])),
        reduce_op=data.get("reduce_op"),
        relaxed=data.get("relaxed", False),
        publish=data.get("publish", False),
        data_sync=data.get("data_sync", "both"),
        barrier_id=data.get("barrier_id"),
        threadblocks=list(data.get("threadblocks", [])),
        semaphores=list(data.get("semaphores", [])),
        iterations=data.get("iterations"),
        unit_bytes=data.get("unit_bytes"),
        body=[op_from_dict(inner) for inner in data.get("body", [])],
        loc=SourceLoc(loc["file"], loc["line"]) if loc else None,
    )


def op_to_dict(op: Op) -> dict:
    out: dict[str, Any] = {"op": op.op}
    if op.reduce_op is not None:
        out["reduce_op"] = op.reduce_op
    if op.src:
        out["src"] = _ref_out(op.src)
    if op.srcs:
        out["srcs"] = [_ref_out(r) for r in op.srcs]
    if op.dst:
        out["dst"] = _ref_out(op.dst)
    if op.packet_dst:
        out["packet_dst"] = _ref_out(op.packet_dst)
    if op.dsts:
        out["dsts"] = [_ref_out(r) for r in op.dsts]
    if op.channels:
        out["channels"] = list(op.channels)
    if op.relaxed:
        out["relaxed"] = True
    if op.publish:
        out["publish"] = True
    if op.data_sync != "both":
        out["data_sync"] = op.data_sync
    if op.barrier_id is not None:
        out["barrier_id"] = op.barrier_id
    if op.threadblocks:
        out["threadblocks"] = list(op.threadblocks)
    if op.semaphores:
        out["semaphores"] = list(op.semaphores)
    if op.iterations is not None:
        out["iterations"] = op.iterations
    if op.unit_bytes is not None:
        out["unit_bytes"] = op.unit_bytes
    if op.body:
        out["body"] = [op_to_dict(inner) for inner in op.body]
    if op.loc:
        out["loc"] = {"file": op.loc.file, "line": op.loc.line}
    return out


def _channel_in(data: dict) -> Channel:
    return Channel(data["id"], data["type"], data.get("peer"), list(data.get("ranks", [])), data.get("buffer"))


def _channel_out(channel: Channel) -> dict:
    out: dict[str, Any] = {"id": channel.id, "type": channel.type}
    if channel.type == "switch":
        out["ranks"] = list(channel.ranks)
        out["buffer"] = channel.buffer
    else:
        out["peer"] = channel.peer
    return out


def plan_from_dict(data: dict) -> Plan:
    plan = Plan(**{key: data[key] for key in _HEADER})
    plan.reuse_scratch = data.get("reuse_scratch", False)
    plan.root = data.get("root")
    plan.metadata = dict(data.get("metadata", {}))
    for gpu in data["gpus"]:
        plan.gpus.append(
            Gpu(
                id=gpu["id"],
                input_chunks=gpu["input_chunks"],
                output_chunks=gpu["output_chunks"],
                scratch_chunks=gpu["scratch_chunks"],
                channels=[_channel_in(c) for c in gpu["channels"]],
                semaphores=[Semaphore(s["id"], s.get("initial_value", 0)) for s in gpu.get("semaphores", [])],
                threadblocks=[
                    ThreadBlock(tb["id"], [op_from_dict(op) for op in tb["ops"]]) for tb in gpu["threadblocks"]
                ],
            )
        )
    return plan


def plan_to_dict(plan: Plan) -> dict:
    out: dict[str, Any] = {"format_version": 1}
    out.update({key: getattr(plan, key) for key in _HEADER})
    if plan.reuse_scratch:
        out["reuse_scratch"] = True
    if plan.root is not None:
        out["root"] = plan.root
    if plan.metadata:
        out["metadata"] = plan.metadata
    out["gpus"] = []
    for gpu in sorted(plan.gpus, key=lambda g: g.id):
        entry: dict[str, Any] = {
            "id": gpu.id,
            "input_chunks": gpu.input_chunks,
            "output_chunks": gpu.output_chunks,
            "scratch_chunks": gpu.scratch_chunks,
            "channels": [_channel_out(c) for c in gpu.channels],
        }
        if gpu.semaphores:
            entry["semaphores"] = [{"id": s.id, "initial_value": s.initial_value} for s in gpu.semaphores]
        entry["threadblocks"] = [{"id": tb.id, "ops": [op_to_dict(op) for op in tb.ops]} for tb in gpu.threadblocks]
        out["gpus"].append(entry)
    return out
