"""``loom import``: an MSCCL++ JSON execution plan as a Loom plan (format_version 1).

``convert_mscclpp_plan(data)`` builds the Loom plan dict; ``import_mscclpp_plan(data)`` also checks
it against the plan schema, runs the plan verifier (unless ``verify=False``) and returns the
canonical plan text. Anything the importer cannot carry over faithfully, and any malformed input,
raises InvalidArgumentError naming the MSCCL++ JSON path (``gpus[0].threadblocks[1].ops[3].name``)
and what was expected; docs/import.md lists the mapping and what is refused.

The plan-level fields map as follows: ``protocol`` "Simple"/"LL" -> "simple"/"ll";
``num_threads_per_block`` -> ``threads_per_block``; ``buffer_alignment`` -> ``alignment_bytes``;
``min/max_message_size`` -> ``min/max_message_bytes`` (MSCCL++ measures an all-gather by its
output, Loom by its input, so those are divided by the world size; the maximum is capped at
2^53 - 1). Channels are numbered per rank in the order MSCCL++ lists them, one per peer of each
``connected_to``; where a peer declares more channels of a type back than a rank declares to it,
the rank gets the missing ones (MSCCL++'s executor adds them the same way), since Loom pairs
channels in both directions. ``reuse_resources`` and ``use_double_scratch_buffer`` have no Loom
field (Loom always double-buffers ``ll`` scratch) and are kept in ``metadata.parameters``.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from loom.errors import InvalidArgumentError
from loom.interop.mscclpp_fields import array, boolean, fail, get, integer, obj, only_keys, shown, string
from loom.interop.mscclpp_ops import BUFFERS, CHANNEL_TYPES, BlockTables, RankTables, convert_op, group_size

PROTOCOLS = {"Simple": "simple", "LL": "ll"}
# Broadcast needs a root, which MSCCL++ plans do not record.
# "test": MSCCL++'s TestCollective, whose plans the verifier checks without a postcondition.
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "test")
MAX_JSON_INTEGER = 2**53 - 1
UINT64_MAX = 2**64 - 1

_PLAN_KEYS = frozenset(
    {
        "name",
        "collective",
        "protocol",
        "inplace",
        "reuse_resources",
        "num_threads_per_block",
        "use_double_scratch_buffer",
        "buffer_alignment",
        "min_message_size",
        "max_message_size",
        "gpus",
    }
)
_GPU_KEYS = frozenset(
    {
        "id",
        "input_chunks",
        "output_chunks",
        "scratch_chunks",
        "threadblocks",
        "channels",
        "remote_buffers",
        "semaphores",
    }
)
_TB_KEYS = frozenset({"id", "ops", "channels", "remote_buffer_refs"})


def import_mscclpp_plan(
    data: Any, *, name: str | None = None, ranks_per_node: int | None = None, verify: bool = True
) -> str:
    """The canonical Loom plan text of the MSCCL++ plan ``data`` (its parsed JSON), checked against
    the plan schema and, with ``verify``, proven by the plan verifier (three calls, as ``loom
    compile``): a plan it finds wrong raises ``loom.verify.VerificationError``. ``name`` replaces the
    plan's name; ``ranks_per_node`` defaults to the world size (MSCCL++ plans do not record it)."""
    from loom.plan.canonical import canonical_plan_text
    from loom.plan.schema import check_schema

    plan = convert_mscclpp_plan(data, name=name, ranks_per_node=ranks_per_node)
    check_schema(plan, plan["name"])
    if verify:
        from loom.verify import DEFAULT_CALLS, check

        check(plan, calls=DEFAULT_CALLS)
    return canonical_plan_text(plan)


def import_mscclpp_file(
    path: str | os.PathLike[str], *, name: str | None = None, ranks_per_node: int | None = None, verify: bool = True
) -> str:
    """``import_mscclpp_plan`` of the MSCCL++ plan file at ``path``; errors name the file."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgumentError(f"{os.fspath(path)}: $: invalid JSON: {error}") from None
    try:
        return import_mscclpp_plan(data, name=name, ranks_per_node=ranks_per_node, verify=verify)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(f"{os.fspath(path)}: {error}") from None


def convert_mscclpp_plan(data: Any, *, name: str | None = None, ranks_per_node: int | None = None) -> dict:
    """The Loom plan dict of an MSCCL++ plan, before the schema check and the verifier."""
    data = obj(data, "$")
    only_keys(data, _PLAN_KEYS, "$")
    gpus = array(get(data, "gpus", "$"), "gpus", nonempty=True)
    world = len(gpus)
    collective = string(get(data, "collective", "$"), "collective", dict.fromkeys(COLLECTIVES))
    protocol = PROTOCOLS[string(get(data, "protocol", "$"), "protocol", PROTOCOLS)]
    plan_name = name if name is not None else string(get(data, "name", "$"), "name")
    threads = integer(data.get("num_threads_per_block", 1024), "num_threads_per_block", 32, 1024)
    if threads % 32:
        raise fail("num_threads_per_block", f"{threads} is not a multiple of 32")
    alignment = integer(data.get("buffer_alignment", 16), "buffer_alignment", 1, 4096)
    if alignment & (alignment - 1):
        raise fail("buffer_alignment", f"{alignment} is not a power of two")
    low, high = _message_bytes(data, collective, world)
    if ranks_per_node is None:
        ranks_per_node = world
    if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int) or ranks_per_node < 1:
        raise InvalidArgumentError(f"ranks_per_node must be a positive integer, got {ranks_per_node!r}")
    if world % ranks_per_node:
        raise InvalidArgumentError(f"ranks_per_node={ranks_per_node} does not divide the world size {world}")

    refine = _refinement(gpus)
    order = _rank_order(gpus)
    channels = {rank: _channels(gpus[index], f"gpus[{index}]", rank, world) for rank, index in order.items()}
    _pair_channels(channels, world)
    programs = [
        _rank(gpus[index], f"gpus[{index}]", rank, world, collective, protocol, refine, channels[rank])
        for rank, index in sorted(order.items())
    ]
    return {
        "format_version": 1,
        "name": plan_name,
        "collective": collective,
        "protocol": protocol,
        "inplace": boolean(get(data, "inplace", "$"), "inplace"),
        "world_size": world,
        "ranks_per_node": ranks_per_node,
        "threads_per_block": threads,
        "min_message_bytes": low,
        "max_message_bytes": high,
        "alignment_bytes": alignment,
        "metadata": {
            "description": f"Imported from the MSCCL++ execution plan {data.get('name', plan_name)} by loom import.",
            "parameters": {
                "source_format": "mscclpp",
                "reuse_resources": boolean(data.get("reuse_resources", False), "reuse_resources"),
                "use_double_scratch_buffer": boolean(
                    data.get("use_double_scratch_buffer", False), "use_double_scratch_buffer"
                ),
                "chunk_refinement": refine,
            },
        },
        "gpus": programs,
    }


def _message_bytes(data: dict, collective: str, world: int) -> tuple[int, int]:
    low = integer(data.get("min_message_size", 0), "min_message_size", 0, UINT64_MAX)
    high = integer(data.get("max_message_size", UINT64_MAX), "max_message_size", 0, UINT64_MAX)
    if collective == "allgather":  # MSCCL++ sizes an all-gather by its output
        low, high = -(-low // world), high // world
    high = min(high, MAX_JSON_INTEGER)
    if high < low:
        raise fail("max_message_size", f"the size range is empty (min {low} > max {high} input bytes)")
    return low, high


def _refinement(gpus: list) -> int:
    """The least common multiple of every op's thread-block group size (see mscclpp_ops)."""
    refine = 1
    for gpu in gpus:
        for block in gpu.get("threadblocks", []) if isinstance(gpu, dict) else []:
            for op in _flat_ops(block.get("ops", []) if isinstance(block, dict) else []):
                refine = math.lcm(refine, group_size(op))
    return refine


def _flat_ops(ops: Any) -> list:
    """A thread block's ops with those of its pipelines in their place (malformed entries as they are)."""
    out: list = []
    for op in ops if isinstance(ops, list) else []:
        inner = op.get("ops") if isinstance(op, dict) and op.get("name") == "pipeline" else None
        out.extend(_flat_ops(inner) if inner is not None else [op])
    return out


def _rank_order(gpus: list) -> dict[int, int]:
    """rank -> position in ``gpus``; every rank exactly once."""
    order: dict[int, int] = {}
    for index, gpu in enumerate(gpus):
        rank = integer(get(obj(gpu, f"gpus[{index}]"), "id", f"gpus[{index}]"), f"gpus[{index}].id", 0, len(gpus) - 1)
        if rank in order:
            raise fail(f"gpus[{index}].id", f"rank {rank} is listed twice (also gpus[{order[rank]}])")
        order[rank] = index
    return order


def _channel_entry(entry: object, where: str, list_key: str) -> tuple[dict, str]:
    """A rank's or thread block's channel entry (``channel_type`` and ``list_key``) and its type:
    memory, port or switch (a rank's switch entries have fields of their own, see _switch_channels)."""
    entry = obj(entry, where)
    kind = string(get(entry, "channel_type", where), f"{where}.channel_type")
    if kind not in (*CHANNEL_TYPES, "switch"):
        raise fail(f"{where}.channel_type", f'{shown(kind)} is not one of "memory", "port", "switch"')
    if kind != "switch":
        only_keys(entry, frozenset({"channel_type", list_key}), where)
    elif list_key == "channel_ids":  # a block's switch entry may repeat the bound buffer
        only_keys(entry, frozenset({"channel_type", list_key, "buff", "buffer_type"}), where)
    return entry, kind


def _switch_channels(gpu: dict, path: str, rank: int, world: int, first_id: int) -> list[tuple[int, list[int], str]]:
    """The rank's switch (NVLS multicast) channels in MSCCL++'s order: (Loom channel id, the ranks of
    its group, the buffer it is bound to). Each entry names one group, which must hold this rank."""
    out: list[tuple[int, list[int], str]] = []
    for i, entry in enumerate(array(gpu.get("channels", []), f"{path}.channels")):
        where = f"{path}.channels[{i}]"
        entry, kind = _channel_entry(entry, where, "connected_to")
        if kind != "switch":
            continue
        # Older MSCCL++ plans (test/execution-files) name the bound buffer "buff".
        key = "buff" if "buff" in entry else "buffer_type"
        only_keys(entry, frozenset({"channel_type", key, "rank_groups"}), where)
        buffer = BUFFERS[string(get(entry, key, where), f"{where}.{key}", BUFFERS)]
        for j, group in enumerate(array(get(entry, "rank_groups", where), f"{where}.rank_groups", True)):
            at = f"{where}.rank_groups[{j}]"
            only_keys(obj(group, at), frozenset({"size", "ranks"}), at)
            ranks = [
                integer(r, f"{at}.ranks[{k}]", 0, world - 1)
                for k, r in enumerate(array(get(group, "ranks", at), f"{at}.ranks", True))
            ]
            if integer(get(group, "size", at), f"{at}.size") != len(ranks) or len(set(ranks)) != len(ranks):
                raise fail(at, f"size {group.get('size')} does not match its {len(ranks)} distinct ranks")
            if rank not in ranks:
                raise fail(f"{at}.ranks", f"the group of rank {rank}'s switch channel does not hold rank {rank}")
            out.append((first_id + len(out), sorted(ranks), buffer))
    return out


def _channels(gpu: dict, path: str, rank: int, world: int) -> dict[str, list[tuple[int, int]]]:
    """channel type -> (Loom channel id, peer), in MSCCL++'s order: one per peer of each entry."""
    out: dict[str, list[tuple[int, int]]] = {kind: [] for kind in CHANNEL_TYPES}
    next_id = 0
    for i, entry in enumerate(array(gpu.get("channels", []), f"{path}.channels")):
        where = f"{path}.channels[{i}]"
        entry, kind = _channel_entry(entry, where, "connected_to")
        if kind == "switch":
            continue  # _switch_channels
        for j, peer in enumerate(array(get(entry, "connected_to", where), f"{where}.connected_to")):
            peer = integer(peer, f"{where}.connected_to[{j}]", 0, world - 1)
            if peer == rank:
                raise fail(f"{where}.connected_to[{j}]", f"rank {rank} cannot have a channel to itself")
            out[kind].append((next_id, peer))
            next_id += 1
    return out


def _pair_channels(channels: dict[int, dict[str, list[tuple[int, int]]]], world: int) -> None:
    """Gives each rank the channels its peers declare to it and it lacks, so every channel pairs."""
    for rank, kinds in sorted(channels.items()):
        next_id = sum(len(listed) for listed in kinds.values())
        for kind in CHANNEL_TYPES:
            for peer in range(world):
                mine = sum(1 for _, p in kinds[kind] if p == peer)
                theirs = sum(1 for _, p in channels[peer][kind] if p == rank) if peer != rank else 0
                for _ in range(theirs - mine):
                    kinds[kind].append((next_id, peer))
                    next_id += 1


def _chunk_counts(gpu: dict, path: str, collective: str, world: int, refine: int) -> tuple[int, int, int]:
    inputs = integer(get(gpu, "input_chunks", path), f"{path}.input_chunks")
    outputs = integer(get(gpu, "output_chunks", path), f"{path}.output_chunks")
    scratch = integer(get(gpu, "scratch_chunks", path), f"{path}.scratch_chunks")
    if collective == "test":  # a TestCollective's buffers are what it says, 0 chunks included
        return inputs * refine, outputs * refine, scratch * refine
    # MSCCL++ lets a plan leave a buffer it never names at 0 chunks; Loom cuts both alike.
    per_rank = {"allgather": (1, world), "reducescatter": (world, 1)}.get(collective, (1, 1))
    if inputs == 0 and outputs == 0:
        raise fail(f"{path}.input_chunks", "input_chunks and output_chunks are both 0")
    if inputs == 0:
        if outputs * per_rank[0] % per_rank[1]:
            raise fail(f"{path}.output_chunks", f"{outputs} output chunks do not fit a {collective} input")
        inputs = outputs * per_rank[0] // per_rank[1]
    if outputs == 0:
        if inputs * per_rank[1] % per_rank[0]:
            raise fail(f"{path}.input_chunks", f"{inputs} input chunks do not fit a {collective} output")
        outputs = inputs * per_rank[1] // per_rank[0]
    return inputs * refine, outputs * refine, scratch * refine


def _rank(
    gpu: dict,
    path: str,
    rank: int,
    world: int,
    collective: str,
    protocol: str,
    refine: int,
    channels: dict[str, list[tuple[int, int]]],
) -> dict:
    only_keys(gpu, _GPU_KEYS, path)
    inputs, outputs, scratch = _chunk_counts(gpu, path, collective, world, refine)
    first_switch = 1 + max((cid for listed in channels.values() for cid, _ in listed), default=-1)
    switches = _switch_channels(gpu, path, rank, world, first_switch)
    tables = RankTables(rank, protocol, refine, channels, _remote_buffers(gpu, path, rank, world), switches=switches)
    blocks = array(get(gpu, "threadblocks", path), f"{path}.threadblocks")
    for i, block in enumerate(blocks):
        only_keys(obj(block, f"{path}.threadblocks[{i}]"), _TB_KEYS, f"{path}.threadblocks[{i}]")
    tables.barriers = _barriers(blocks, path)
    seen: dict[int, int] = {}
    threadblocks = []
    for i, block in enumerate(blocks):
        where = f"{path}.threadblocks[{i}]"
        tb = integer(get(block, "id", where), f"{where}.id")
        if tb in seen:
            raise fail(
                f"{where}.id", f"thread block {tb} is listed twice on rank {rank} (also threadblocks[{seen[tb]}])"
            )
        seen[tb] = i
        tables_tb = BlockTables(
            tb, _block_channels(block, where, channels, len(switches)), _block_buffers(block, where, tables)
        )
        ops: list[dict] = []
        for j, op in enumerate(array(get(block, "ops", where), f"{where}.ops")):
            ops.extend(convert_op(op, f"{where}.ops[{j}]", tables, tables_tb))
        threadblocks.append({"id": tb, "ops": ops})
    semaphores = []
    for i, entry in enumerate(array(gpu.get("semaphores", []), f"{path}.semaphores")):
        where = f"{path}.semaphores[{i}]"
        only_keys(obj(entry, where), frozenset({"init_value"}), where)
        initial = integer(get(entry, "init_value", where), f"{where}.init_value", 0, 2**32 - 1)
        semaphores.append({"id": i, "initial_value": initial})
    ids = sorted((cid, kind, peer) for kind, listed in channels.items() for cid, peer in listed)
    declared = [{"id": cid, "type": kind, "peer": peer} for cid, kind, peer in ids]
    declared += [{"id": cid, "type": "switch", "ranks": ranks, "buffer": buffer} for cid, ranks, buffer in switches]
    return {
        "id": rank,
        "input_chunks": inputs,
        "output_chunks": outputs,
        "scratch_chunks": scratch,
        "channels": declared,
        "semaphores": semaphores,
        "threadblocks": threadblocks,
    }


def _remote_buffers(gpu: dict, path: str, rank: int, world: int) -> list[tuple[int, str, tuple[str, ...]]]:
    out = []
    for i, entry in enumerate(array(gpu.get("remote_buffers", []), f"{path}.remote_buffers")):
        where = f"{path}.remote_buffers[{i}]"
        only_keys(obj(entry, where), frozenset({"rank", "type", "access_channel_types"}), where)
        peer = integer(get(entry, "rank", where), f"{where}.rank", 0, world - 1)
        if peer == rank:
            raise fail(f"{where}.rank", f"rank {rank} lists its own buffer as remote")
        buffer = BUFFERS[string(get(entry, "type", where), f"{where}.type", BUFFERS)]
        access_path = f"{where}.access_channel_types"
        access = tuple(
            string(kind, f"{access_path}[{j}]", dict.fromkeys(CHANNEL_TYPES))
            for j, kind in enumerate(array(get(entry, "access_channel_types", where), access_path, True))
        )
        out.append((peer, buffer, access))
    return out


def _block_channels(
    block: dict, path: str, channels: dict[str, list[tuple[int, int]]], switches: int
) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {kind: [] for kind in (*CHANNEL_TYPES, "switch")}
    for i, entry in enumerate(array(block.get("channels", []), f"{path}.channels")):
        where = f"{path}.channels[{i}]"
        entry, kind = _channel_entry(entry, where, "channel_ids")
        declared = switches if kind == "switch" else len(channels[kind])
        for j, index in enumerate(array(get(entry, "channel_ids", where), f"{where}.channel_ids")):
            index = integer(index, f"{where}.channel_ids[{j}]")
            if index >= declared:
                raise fail(
                    f"{where}.channel_ids[{j}]",
                    f"{index} is out of range: the rank declares {declared} {kind} channel(s)",
                )
            out[kind].append(index)
    return out


def _block_buffers(block: dict, path: str, tables: RankTables) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {kind: [] for kind in CHANNEL_TYPES}
    for i, entry in enumerate(array(block.get("remote_buffer_refs", []) or [], f"{path}.remote_buffer_refs")):
        where = f"{path}.remote_buffer_refs[{i}]"
        only_keys(obj(entry, where), frozenset({"access_channel_type", "remote_buffer_ids"}), where)
        kind = string(
            get(entry, "access_channel_type", where), f"{where}.access_channel_type", dict.fromkeys(CHANNEL_TYPES)
        )
        for j, index in enumerate(array(get(entry, "remote_buffer_ids", where), f"{where}.remote_buffer_ids")):
            index = integer(index, f"{where}.remote_buffer_ids[{j}]")
            if index >= len(tables.remote_buffers):
                raise fail(
                    f"{where}.remote_buffer_ids[{j}]",
                    f"{index} is out of range: the rank declares {len(tables.remote_buffers)} remote buffer(s)",
                )
            out[kind].append(index)
    return out


def _barriers(blocks: list, path: str) -> dict[int, list[int]]:
    """barrier id -> the thread blocks of the rank that have a barrier op with that id. MSCCL++
    names only how many blocks meet; Loom lists them."""
    out: dict[int, list[int]] = {}
    for block in blocks:
        for op in _flat_ops(block.get("ops")):
            if isinstance(op, dict) and op.get("name") == "barrier":
                barrier = op.get("barrier_id")
                if isinstance(barrier, int) and block.get("id") not in out.setdefault(barrier, []):
                    out[barrier].append(block.get("id"))
    return {barrier: sorted(tbs) for barrier, tbs in out.items()}
