"""MSCCL++ operations and buffer references, as Loom plan ops and chunk references.

MSCCL++ (src/core/executor/execution_plan.cc) names each op with a short code and lists its
buffers in two arrays, ``src_buff`` and ``dst_buff``, whose positions mean different things per op
(the first destination of ``rres`` is local, the rest remote, ...). ``OP_NAMES`` maps each code
Loom can run to its Loom op; ``convert_op`` fills the Loom fields from those positions.

References: a local buffer is ``{"type": "i"|"o"|"s", "index", "size"}``; a remote one is
``{"buffer_id", "index", "size"}``, where ``buffer_id`` indexes the thread block's list of remote
buffers for the op's ``channel_type`` (its ``remote_buffer_refs``), whose entries index the rank's
``remote_buffers`` (a peer rank and a buffer type). Loom names a remote chunk through a channel to
that peer instead: the op's own ``channel_ids`` entry when it has one, otherwise the thread block's
(then the rank's) first channel of the op's type to that peer. Memory-channel data ops in MSCCL++
address the peer's memory directly, so any channel to the right peer means the same bytes.

Thread-block groups (``tbg_info``: this block does slice ``tb_id`` of ``tbg_size`` of every range
of the op) have no Loom field; the importer instead cuts every buffer into ``refine`` times more
chunks (``refine``: the least common multiple of the group sizes), so a slice is whole chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loom.interop.mscclpp_fields import array, fail, get, integer, obj, only_keys, shown, string
from loom.ir.effects import PAIRED_SENDS, longest_range

BUFFERS = {"i": "input", "o": "output", "s": "scratch"}
CHANNEL_TYPES = ("memory", "port")
REDUCE_OPS = ("sum", "min", "max")

# MSCCL++ op code -> the Loom op it becomes (put / get / packet sends may split into several).
OP_NAMES = {
    "nop": "nop",
    "barrier": "barrier",
    "signal": "signal",
    "wait": "wait",
    "rlxsignal": "signal",
    "rlxwait": "wait",
    "flush": "flush",
    "sem_acquire": "sem_acquire",
    "sem_release": "sem_release",
    "copy": "copy",
    "put": "put",
    "pws": "put_with_signal",
    "pwsf": "put_with_signal_and_flush",
    "get": "get",
    "re": "reduce",
    "res": "reduce_send",
    "rre": "read_reduce",
    "rres": "read_reduce_send",
    "ppkt": "put_packet",
    "rppkt": "read_put_packet",
    "cpkt": "copy_packet",
    "upkt": "unpack_packet",
    "repkt": "reduce_packet",
    "respkt": "reduce_send_packet",
    "recpkt": "reduce_copy_packet",
    "recspkt": "reduce_copy_send_packet",
    "glre": "multimem_reduce",
    "glres": "multimem_reduce",  # with multicast destinations
    "gstore": "multimem_broadcast",
}
# Ops MSCCL++ has and Loom cannot express; the reason goes into the error and docs/import.md.
REFUSED = {
    "gstorepkt": "Loom has no packet multicast (plan vocabulary: multicast ops move plain data)",
}
PACKET_OPS = frozenset(name for name, loom in OP_NAMES.items() if loom.endswith("_packet"))
_OP_KEYS = frozenset(
    {
        "name",
        "src_buff",
        "dst_buff",
        "channel_ids",
        "channel_type",
        "reduce_op",
        "tbg_info",
        "barrier_id",
        "num_threadblocks",
        "semaphore_ids",
    }
)


@dataclass
class RankTables:
    """What an op of one rank needs to know about that rank's plan."""

    rank: int
    protocol: str
    refine: int
    # channel type -> the rank's channels of that type, in MSCCL++ order: (Loom channel id, peer)
    channels: dict[str, list[tuple[int, int]]]
    # the rank's remote_buffers: (peer rank, Loom buffer name, access channel types)
    remote_buffers: list[tuple[int, str, tuple[str, ...]]]
    # barrier id -> ids of the thread blocks of this rank that take part in it
    barriers: dict[int, list[int]] = field(default_factory=dict)
    # the rank's switch channels in MSCCL++ order: (Loom channel id, group ranks, bound buffer)
    switches: list[tuple[int, list[int], str]] = field(default_factory=list)


@dataclass
class BlockTables:
    """One thread block's channel and remote-buffer lists, per channel type."""

    tb: int
    channels: dict[str, list[int]]  # indexes into RankTables.channels[type]
    buffers: dict[str, list[int]]  # indexes into RankTables.remote_buffers


@dataclass
class _Op:
    """One MSCCL++ op being converted, with what every helper needs."""

    data: dict
    path: str
    rank: RankTables
    block: BlockTables
    slice_: tuple[int, int] = (0, 1)  # (tb_id, tbg_size)

    def channel_type(self) -> str:
        return string(
            get(self.data, "channel_type", self.path), f"{self.path}.channel_type", dict.fromkeys(CHANNEL_TYPES)
        )

    def buffers(self, key: str) -> list:
        return array(get(self.data, key, self.path), f"{self.path}.{key}", nonempty=True)

    def channel_indexes(self) -> list[int]:
        key = f"{self.path}.channel_ids"
        return [integer(v, f"{key}[{i}]") for i, v in enumerate(array(self.data.get("channel_ids", []), key))]


def convert_op(data: Any, path: str, rank: RankTables, block: BlockTables) -> list[dict]:
    """The Loom ops of one MSCCL++ op (usually one; a put to destinations with different sources
    becomes one put per destination)."""
    data = obj(data, path)
    name = string(get(data, "name", path), f"{path}.name")
    if name == "pipeline":
        return [_pipeline(data, path, rank, block)]
    if name in REFUSED:
        raise fail(f"{path}.name", f"{shown(name)} cannot be imported: {REFUSED[name]}")
    if name not in OP_NAMES:
        raise fail(
            f"{path}.name",
            f"{shown(name)} is not an MSCCL++ op Loom can import (expected one of {', '.join(sorted(OP_NAMES))})",
        )
    only_keys(data, _OP_KEYS, path)
    if name in PACKET_OPS and rank.protocol != "ll":
        raise fail(f"{path}.name", f"packet op {shown(name)} needs the LL protocol, but this plan's protocol is Simple")
    op = _Op(data, path, rank, block, _group_slice(data, path))
    return _CONVERTERS[OP_NAMES[name]](op, OP_NAMES[name], name)


def _group_slice(data: dict, path: str) -> tuple[int, int]:
    if "tbg_info" not in data:
        return (0, 1)
    info = obj(data["tbg_info"], f"{path}.tbg_info")
    only_keys(info, frozenset({"tb_id", "tbg_size"}), f"{path}.tbg_info")
    size = integer(get(info, "tbg_size", f"{path}.tbg_info"), f"{path}.tbg_info.tbg_size", 1, 1024)
    index = integer(get(info, "tb_id", f"{path}.tbg_info"), f"{path}.tbg_info.tb_id", 0, size - 1)
    return (index, size)


def group_size(data: Any) -> int:
    """The thread-block group size an op declares (1 without ``tbg_info``); unchecked, for the
    first pass that picks the refinement factor."""
    if isinstance(data, dict) and isinstance(data.get("tbg_info"), dict):
        size = data["tbg_info"].get("tbg_size")
        if isinstance(size, int) and not isinstance(size, bool) and size >= 1:
            return size
    return 1


# -- chunk references -------------------------------------------------------------------------


def _range(op: _Op, ref: dict, path: str) -> dict:
    """index/count of a reference, in the refined chunk grid, for this block's slice."""
    index = integer(get(ref, "index", path), f"{path}.index")
    size = integer(get(ref, "size", path), f"{path}.size", 1)
    part, parts = op.slice_
    refine = op.rank.refine
    if (size * refine) % parts:
        raise fail(f"{path}.size", f"{size} chunk(s) cannot be cut into tbg_size={parts} equal slices")
    count = size * refine // parts
    return {"index": index * refine + part * count, "count": count}


def local_ref(op: _Op, key: str, position: int, buffer: str | None = None) -> dict:
    path = f"{op.path}.{key}[{position}]"
    ref = obj(op.buffers(key)[position], path)
    only_keys(ref, frozenset({"type", "index", "size", "rank"}), path)
    if "buffer_id" in ref or "type" not in ref:
        raise fail(path, "expected a local buffer reference {type, index, size} here")
    # MSCCL++ names the rank of some local references (a gstore's source): it must be this one.
    if "rank" in ref and integer(ref["rank"], f"{path}.rank") != op.rank.rank:
        raise fail(f"{path}.rank", f"a local reference of rank {op.rank.rank} names rank {ref['rank']}")
    name = BUFFERS[string(ref["type"], f"{path}.type", BUFFERS)]
    if buffer is not None and name != buffer:
        raise fail(f"{path}.type", f"{shown(ref['type'])} here must be {shown('s')} (packets live in scratch)")
    return {"buffer": name, **_range(op, ref, path)}


def remote_ref(op: _Op, key: str, position: int, channel_position: int | None, buffer: str | None = None) -> dict:
    """A ``{buffer_id, index, size}`` reference as a Loom remote reference; ``channel_position`` is
    the entry of the op's ``channel_ids`` that carries it, when the op names one per reference."""
    path = f"{op.path}.{key}[{position}]"
    ref = obj(op.buffers(key)[position], path)
    only_keys(ref, frozenset({"buffer_id", "index", "size"}), path)
    if "buffer_id" not in ref:
        raise fail(path, "expected a remote buffer reference {buffer_id, index, size} here")
    kind = op.channel_type()
    listed = op.block.buffers.get(kind, [])
    buffer_id = integer(ref["buffer_id"], f"{path}.buffer_id")
    if buffer_id >= len(listed):
        raise fail(
            f"{path}.buffer_id",
            f"{buffer_id} is out of range: thread block {op.block.tb} lists {len(listed)} remote buffer(s) "
            f"for {kind} channels (remote_buffer_refs)",
        )
    peer, name, access = op.rank.remote_buffers[listed[buffer_id]]
    if kind not in access:
        raise fail(f"{path}.buffer_id", f"remote buffer {listed[buffer_id]} is not accessible over {kind} channels")
    if buffer is not None and name != buffer:
        raise fail(f"{path}.buffer_id", f"remote buffer {listed[buffer_id]} is {name}, but packets go to scratch")
    channel = _channel_to(op, kind, peer, channel_position, f"{path}.buffer_id")
    return {"channel": channel, "buffer": name, **_range(op, ref, path)}


def _channel_to(op: _Op, kind: str, peer: int, position: int | None, path: str) -> int:
    rank_channels = op.rank.channels.get(kind, [])
    indexes = op.channel_indexes()
    if position is not None and position < len(indexes):
        channel, channel_peer = _block_channel(op, kind, indexes[position], f"{op.path}.channel_ids[{position}]")
        if channel_peer != peer:
            raise fail(
                f"{op.path}.channel_ids[{position}]",
                f"this {kind} channel connects to rank {channel_peer}, but the buffer it carries is on rank {peer}",
            )
        return channel
    for index in op.block.channels.get(kind, []):
        if rank_channels[index][1] == peer:
            return rank_channels[index][0]
    for channel, channel_peer in rank_channels:
        if channel_peer == peer:
            return channel
    raise fail(path, f"rank {op.rank.rank} has no {kind} channel to rank {peer}, where this buffer is")


def _block_channel(op: _Op, kind: str, index: int, path: str) -> tuple[int, int]:
    listed = op.block.channels.get(kind, [])
    if index >= len(listed):
        raise fail(path, f"{index} is out of range: thread block {op.block.tb} lists {len(listed)} {kind} channel(s)")
    return op.rank.channels[kind][listed[index]]


def _reduce_op(op: _Op) -> str:
    return string(op.data.get("reduce_op", "sum"), f"{op.path}.reduce_op", dict.fromkeys(REDUCE_OPS))


def _count(op: _Op, key: str, minimum: int, maximum: int | None = None) -> int:
    count = len(op.buffers(key))
    if count < minimum or (maximum is not None and count > maximum):
        bound = (
            str(minimum) if minimum == maximum else f"{minimum} or more" if maximum is None else f"{minimum}..{maximum}"
        )
        raise fail(f"{op.path}.{key}", f"{shown(op.data['name'])} takes {bound} entries here, got {count}")
    return count


# -- converters, one per Loom op family -------------------------------------------------------


def _sync(op: _Op, loom: str, name: str) -> list[dict]:
    kind = op.channel_type()
    if loom == "flush" and kind != "port":
        raise fail(f"{op.path}.channel_type", f"flush needs port channels, got {shown(kind)}")
    indexes = op.channel_indexes()
    if not indexes:
        raise fail(f"{op.path}.channel_ids", f"{shown(name)} needs a non-empty list of channels")
    channels = [_block_channel(op, kind, index, f"{op.path}.channel_ids[{i}]")[0] for i, index in enumerate(indexes)]
    if len(set(channels)) != len(channels):
        raise fail(f"{op.path}.channel_ids", "lists a channel twice")
    out: dict[str, Any] = {"op": loom, "channels": channels}
    if name.startswith("rlx"):
        out["relaxed"] = True
    return [out]


def _nop(op: _Op, loom: str, name: str) -> list[dict]:
    return [{"op": "nop"}]


def _barrier(op: _Op, loom: str, name: str) -> list[dict]:
    barrier = integer(get(op.data, "barrier_id", op.path), f"{op.path}.barrier_id")
    blocks = op.rank.barriers[barrier]
    if "num_threadblocks" in op.data:
        declared = integer(op.data["num_threadblocks"], f"{op.path}.num_threadblocks", 1)
        if declared != len(blocks):
            raise fail(
                f"{op.path}.num_threadblocks",
                f"{declared} thread blocks should meet at barrier {barrier}, but {len(blocks)} of rank "
                f"{op.rank.rank} have it (thread blocks {', '.join(map(str, blocks))})",
            )
    return [{"op": "barrier", "barrier_id": barrier, "threadblocks": blocks}]


def _semaphore(op: _Op, loom: str, name: str) -> list[dict]:
    key = f"{op.path}.semaphore_ids"
    ids = [integer(v, f"{key}[{i}]") for i, v in enumerate(array(get(op.data, "semaphore_ids", op.path), key, True))]
    return [{"op": loom, "semaphores": ids}]


def switch_ref(op: _Op, key: str, position: int) -> dict:
    """A ``{switch_channel_id, index, size}`` reference: the range on every member of the switch
    channel's group (``switch_channel_id`` indexes the thread block's switch channels)."""
    path = f"{op.path}.{key}[{position}]"
    ref = obj(op.buffers(key)[position], path)
    only_keys(ref, frozenset({"switch_channel_id", "index", "size"}), path)
    if "switch_channel_id" not in ref:
        raise fail(path, "expected a switch buffer reference {switch_channel_id, index, size} here")
    listed = op.block.channels.get("switch", [])
    index = integer(ref["switch_channel_id"], f"{path}.switch_channel_id")
    if index >= len(listed):
        raise fail(
            f"{path}.switch_channel_id",
            f"{index} is out of range: thread block {op.block.tb} lists {len(listed)} switch channel(s)",
        )
    channel, _, buffer = op.rank.switches[listed[index]]
    return {"channel": channel, "buffer": buffer, **_range(op, ref, path)}


def _multimem(op: _Op, loom: str, name: str) -> list[dict]:
    """NVLS: ``glre`` reduces a range over the group into a local range; ``gstore`` writes a local range
    to every member; ``glres`` does both (reduce over the group, store the result to every member):
    a multimem_reduce with multicast destinations (``dsts``) and no local one."""
    _count(op, "src_buff", 1, 1)
    _count(op, "dst_buff", 1, 1)
    if name == "gstore":
        return [
            {"op": "multimem_broadcast", "src": local_ref(op, "src_buff", 0), "dsts": [switch_ref(op, "dst_buff", 0)]}
        ]
    source = switch_ref(op, "src_buff", 0)
    if name == "glre":
        return [
            {"op": "multimem_reduce", "reduce_op": _reduce_op(op), "src": source, "dst": local_ref(op, "dst_buff", 0)}
        ]
    targets = [switch_ref(op, "dst_buff", 0)]
    return [{"op": "multimem_reduce", "reduce_op": _reduce_op(op), "src": source, "dsts": targets}]


def _copy(op: _Op, loom: str, name: str) -> list[dict]:
    _count(op, "src_buff", 1, 1)
    _count(op, "dst_buff", 1, 1)
    if loom == "copy_packet":
        return [{"op": loom, "src": local_ref(op, "src_buff", 0), "dst": local_ref(op, "dst_buff", 0, "scratch")}]
    if loom == "unpack_packet":
        return [{"op": loom, "src": local_ref(op, "src_buff", 0, "scratch"), "dst": local_ref(op, "dst_buff", 0)}]
    return [{"op": loom, "src": local_ref(op, "src_buff", 0), "dst": local_ref(op, "dst_buff", 0)}]


def _put(op: _Op, loom: str, name: str) -> list[dict]:
    """put / put_with_signal(_and_flush) / put_packet / read_put_packet: MSCCL++ pairs source i with
    destination i (packet sends may give one source for all). Loom's put, put_packet and
    read_put_packet take one source for all (src) or one per destination (srcs); put_with_signal(_and_flush)
    takes one source, so MSCCL++'s with several become one op per run of equal sources."""
    kind = op.channel_type()
    if loom.startswith("put_with_signal") and kind != "port":
        raise fail(f"{op.path}.channel_type", f"{shown(name)} needs port channels, got {shown(kind)}")
    packet = loom.endswith("_packet")
    ndst = _count(op, "dst_buff", 1)
    nsrc = _count(op, "src_buff", 1, ndst)
    if nsrc not in (1, ndst):
        raise fail(f"{op.path}.src_buff", f"expected 1 or {ndst} sources (one per destination), got {nsrc}")
    src_buffer = "scratch" if loom == "read_put_packet" else None
    srcs = [local_ref(op, "src_buff", i if nsrc > 1 else 0, src_buffer) for i in range(ndst)]
    if loom == "put_packet" and kind == "port" and all(src["buffer"] == "scratch" for src in srcs):
        # MSCCL++'s port channel sends a scratch source as the packets it already holds.
        loom = "read_put_packet"
    dsts = [remote_ref(op, "dst_buff", i, i, "scratch" if packet else None) for i in range(ndst)]
    if all(src == srcs[0] for src in srcs):
        return [{"op": loom, "src": srcs[0], "dsts": dsts}]
    if loom in PAIRED_SENDS:
        return [{"op": loom, "srcs": srcs, "dsts": dsts}]
    out: list[dict] = []
    for src, dst in zip(srcs, dsts, strict=True):
        if out and out[-1]["src"] == src:
            out[-1]["dsts"].append(dst)
        else:
            out.append({"op": loom, "src": src, "dsts": [dst]})
    return out


def _get(op: _Op, loom: str, name: str) -> list[dict]:
    if op.channel_type() != "memory":
        raise fail(f"{op.path}.channel_type", '"get" needs memory channels')
    count = _count(op, "src_buff", 1)
    _count(op, "dst_buff", count, count)
    return [
        {"op": "get", "src": remote_ref(op, "src_buff", i, i), "dst": local_ref(op, "dst_buff", i)}
        for i in range(count)
    ]


def _reduce(op: _Op, loom: str, name: str) -> list[dict]:
    """reduce / reduce_send / read_reduce / read_reduce_send: src_buff[0] and dst_buff[0] are local;
    the other sources are local (re, res) or remote (rre, rres); the other destinations remote."""
    reads_remote = loom.startswith("read_")
    sends = loom.endswith("_send")
    nsrc = _count(op, "src_buff", 2)
    ndst = _count(op, "dst_buff", 2 if sends else 1, None if sends else 1)
    srcs = [local_ref(op, "src_buff", 0)]
    for i in range(1, nsrc):
        srcs.append(remote_ref(op, "src_buff", i, None) if reads_remote else local_ref(op, "src_buff", i))
    out: dict[str, Any] = {"op": loom, "reduce_op": _reduce_op(op), "srcs": srcs, "dst": local_ref(op, "dst_buff", 0)}
    if sends:
        out["dsts"] = [remote_ref(op, "dst_buff", i, None) for i in range(1, ndst)]
    return [out]


def _reduce_packet(op: _Op, loom: str, name: str) -> list[dict]:
    """src_buff: the local operand, then the packets (scratch); dst_buff: the local result, then the
    local packet copy (recpkt, recspkt), then the remote packet destinations (respkt, recspkt)."""
    copies = "copy" in loom
    sends = "send" in loom
    nsrc = _count(op, "src_buff", 2)
    first_remote = 2 if copies else 1
    ndst = _count(op, "dst_buff", first_remote + (1 if sends else 0), None if sends else first_remote)
    out: dict[str, Any] = {
        "op": loom,
        "reduce_op": _reduce_op(op),
        "src": local_ref(op, "src_buff", 0),
        "srcs": [local_ref(op, "src_buff", i, "scratch") for i in range(1, nsrc)],
        "dst": local_ref(op, "dst_buff", 0),
    }
    if copies:
        out["packet_dst"] = local_ref(op, "dst_buff", 1, "scratch")
    if sends:
        out["dsts"] = [remote_ref(op, "dst_buff", i, None, "scratch") for i in range(first_remote, ndst)]
    return [out]


def _pipeline(data: dict, path: str, rank: RankTables, block: BlockTables) -> dict:
    """MSCCL++'s pipeline (``iter_context``: ``unit_size`` bytes per iteration) as a Loom pipeline
    sized in bytes. MSCCL++ runs num_chunks x chunk size / unit iterations, Loom as many as the
    body's longest range needs: the same when num_chunks is that range's length."""
    only_keys(data, frozenset({"name", "iter_context", "ops"}), path)
    context = obj(get(data, "iter_context", path), f"{path}.iter_context")
    only_keys(context, frozenset({"unit_size", "num_chunks"}), f"{path}.iter_context")
    unit = integer(get(context, "unit_size", f"{path}.iter_context"), f"{path}.iter_context.unit_size", 16, 2**32 - 1)
    if unit % 16:
        raise fail(f"{path}.iter_context.unit_size", f"a Loom pipeline slices in multiples of 16 bytes, got {unit}")
    num_chunks = integer(get(context, "num_chunks", f"{path}.iter_context"), f"{path}.iter_context.num_chunks", 1)
    body: list[dict] = []
    for position, inner in enumerate(array(get(data, "ops", path), f"{path}.ops", nonempty=True)):
        inner_path = f"{path}.ops[{position}]"
        if isinstance(inner, dict) and inner.get("name") == "pipeline":
            raise fail(f"{inner_path}.name", "a pipeline inside a pipeline cannot be imported (Loom's do not nest)")
        body.extend(convert_op(inner, inner_path, rank, block))
    longest = longest_range(body)
    if longest and longest != num_chunks * rank.refine:
        raise fail(
            f"{path}.iter_context.num_chunks",
            f"{num_chunks} chunk(s), but the longest range in the pipeline's ops has {longest // rank.refine}: Loom"
            " counts the iterations from that range, so the two would slice differently",
        )
    return {"op": "pipeline", "unit_bytes": unit, "body": body}


_CONVERTERS = {
    "multimem_reduce": _multimem,
    "multimem_broadcast": _multimem,
    "nop": _nop,
    "barrier": _barrier,
    "signal": _sync,
    "wait": _sync,
    "flush": _sync,
    "sem_acquire": _semaphore,
    "sem_release": _semaphore,
    "copy": _copy,
    "copy_packet": _copy,
    "unpack_packet": _copy,
    "put": _put,
    "put_with_signal": _put,
    "put_with_signal_and_flush": _put,
    "put_packet": _put,
    "read_put_packet": _put,
    "get": _get,
    "reduce": _reduce,
    "reduce_send": _reduce,
    "read_reduce": _reduce,
    "read_reduce_send": _reduce,
    "reduce_packet": _reduce_packet,
    "reduce_send_packet": _reduce_packet,
    "reduce_copy_packet": _reduce_packet,
    "reduce_copy_send_packet": _reduce_packet,
}
