"""The mutation corpus of the rules issue 54 added to the verifier: every library algorithm (4 ranks on one
node, 2 nodes x 2 where it has them, in and out of place) broken in one place at a time, in four ways,

- a dropped flush (a ``flush``, or the flush of a ``put_with_signal_and_flush``);
- a write moved before a flush (the flush moved to the end of its thread block, past what writes the source);
- a relaxed signal that publishes data (a plain ``signal`` on a memory channel made ``relaxed``);
- a missing sync between the threads of a block (a ``nop`` dropped);

and the verifier must refuse at least 95% of the mutants of each kind that are not equivalent. A mutant is
equivalent when the executor itself makes up for the change (``_equivalent`` says why: it syncs a block
before every port put, and flushes every port channel a block put on at the block's end); those are listed
with the reason and left out of the count, and every other mutant the verifier passes is listed too."""

from __future__ import annotations

import copy
import functools
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loom.algorithms import ALGORITHMS
from loom.compiler.driver import compile_algorithm
from loom.ir.shapes import inplace_alias
from loom.verify import verify

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from plan_mutants import drop_flush  # noqa: E402

SHAPES = ((4, None), (4, 2))
KINDS = ("dropped flush", "write moved before flush", "relaxed signal publishing data", "missing thread sync")


@functools.cache
def _plans() -> list[tuple[str, dict]]:
    out = []
    for name, algorithm in sorted(ALGORITHMS.items()):
        for world, per_node in SHAPES:
            if per_node is None and world not in algorithm.world_sizes:
                continue
            if per_node is not None and (world // per_node, per_node) not in algorithm.multi_node:
                continue
            for inplace in (False, True):
                options = {"root": 1} if name in ("broadcast", "reduce_packet", "reduce_read") else {}
                text = compile_algorithm(name, world, per_node, inplace=inplace, verify=False, **options)
                shape = f"{world}r" if per_node is None else f"{world // per_node}x{per_node}"
                out.append((f"{name}-{shape}" + ("-inplace" if inplace else ""), json.loads(text)))
    return out


def _sites(plan: dict) -> Iterator[tuple[dict, list[dict], int, dict]]:
    """(the rank's gpu, the op list, position, op) of every op, pipeline bodies included."""
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            for index, op in enumerate(tb["ops"]):
                yield gpu, tb["ops"], index, op
                for inner_index, inner in enumerate(op.get("body", [])):
                    yield gpu, op["body"], inner_index, inner


def _mutants(plan: dict, kind: str) -> Iterator[tuple[str, dict, str | None]]:
    """(where, mutant, why it is equivalent or None) for every place ``kind`` applies to in ``plan``."""
    for number, (gpu, ops, index, op) in enumerate(list(_sites(plan))):
        channels = {channel["id"]: channel["type"] for channel in gpu["channels"]}
        where = f"{op.get('loc', {}).get('file', '?')}:{op.get('loc', {}).get('line', '?')} ({op['op']}, site {number})"
        if kind == "dropped flush" and op["op"] in ("flush", "put_with_signal_and_flush"):
            why = _flush_equivalent(plan, gpu, ops, index)
            yield where, _changed(plan, number, drop_flush), why
        elif kind == "write moved before flush" and op["op"] == "flush" and index + 1 < len(ops):
            why = _flush_equivalent(plan, gpu, ops, index)
            yield where, _changed(plan, number, lambda ops, i: ops.append(ops.pop(i))), why
        elif kind == "relaxed signal publishing data" and op["op"] == "signal" and not op.get("relaxed"):
            if all(channels[c] == "memory" for c in op["channels"]) and op.get("data_sync", "both") != "none":
                yield where, _changed(plan, number, lambda ops, i: ops[i].update(relaxed=True)), None
        elif kind == "missing thread sync" and op["op"] == "nop":
            why = None
            if (
                index + 1 < len(ops)
                and _port_channels(ops[index + 1], channels)
                and "reduce" not in ops[index + 1]["op"]
            ):
                why = "the nop comes right before a put over a port channel, and the executor syncs the block there"
            elif 0 < index < len(ops) - 1 and _after_unrelated_port_put(plan, gpu, ops[index - 1], ops[index + 1]):
                why = (
                    "the nop comes right after a put over a port channel, before which the executor syncs the block,"
                    " and the put touches nothing the op after the nop writes"
                )
            elif index > 0 and _port_channels(ops[index - 1], channels) and "reduce" in ops[index - 1]["op"]:
                why = (
                    "the nop comes right after a reduce-and-send over a port channel, which the executor syncs the"
                    " block after (before the proxy sends the result, or the staged packets' reads-only flush)"
                )
            yield where, _changed(plan, number, lambda ops, i: ops.pop(i)), why


def _after_unrelated_port_put(plan: dict, gpu: dict, put: dict, after: dict) -> bool:
    """Whether ``put`` is a (non-reducing) put over a port channel that reads nothing ``after`` writes: then what a
    nop between them orders was ordered by the block sync the executor makes before the put."""
    channels = {channel["id"]: channel["type"] for channel in gpu["channels"]}
    if not _port_channels(put, channels) or "reduce" in put["op"]:
        return False
    written = [after.get("dst"), after.get("packet_dst")]
    return not _local(plan, gpu, [put.get("src"), *put.get("srcs", [])]) & _local(plan, gpu, written)


def _port_channels(op: dict, channels: dict[int, str]) -> set[int]:
    """The port channels a data op writes through."""
    return {ref["channel"] for ref in op.get("dsts", []) if channels.get(ref.get("channel")) == "port"}


def _local(plan: dict, gpu: dict, refs: list) -> set[tuple[str, int]]:
    """(buffer, chunk) of the refs that stay on this rank, each chunk by its one name (in place, input and
    output alias)."""
    out = set()
    for ref in refs:
        if ref and ref.get("channel") is None:
            for i in range(ref["index"], ref["index"] + ref.get("count", 1)):
                name = (ref["buffer"], i)
                if plan["inplace"] and ref["buffer"] != "scratch":
                    name = inplace_alias(
                        plan["collective"], gpu["id"], gpu["input_chunks"], gpu["output_chunks"], ref["buffer"], i
                    )
                out.add(name)
    return out


def _flush_equivalent(plan: dict, gpu: dict, ops: list[dict], index: int) -> str | None:
    """Why dropping (or moving to the block's end) the flush at ``ops[index]`` changes nothing the executor does:
    no op after it in the block writes what the block's puts since the channel's last flush sent, and the
    executor flushes every port channel a block put on at the block's end. None when something does."""
    channels = {channel["id"]: channel["type"] for channel in gpu["channels"]}
    flushed = set(ops[index].get("channels", [])) or _port_channels(ops[index], channels)
    sent: set = set()
    for op in ops[: index + 1]:
        if op["op"] == "flush" and set(op.get("channels", [])) & flushed and op is not ops[index]:
            sent = set()
        if _port_channels(op, channels) & flushed:
            read = [op.get("src"), *op.get("srcs", [])] + ([op.get("dst")] if "reduce" in op["op"] else [])
            sent |= _local(plan, gpu, read)
    for op in ops[index + 1 :]:
        written = [op.get("dst"), *[ref for ref in op.get("dsts", []) if ref.get("channel") is None]]
        if _local(plan, gpu, written) & sent:
            return None
    return "nothing after the flush writes what was sent, and the executor flushes every port channel at a block's end"


def _changed(plan: dict, number: int, change) -> dict:
    mutant = copy.deepcopy(plan)
    _, ops, index, _ = list(_sites(mutant))[number]
    change(ops, index)
    return mutant


@pytest.mark.parametrize("kind", KINDS)
def test_the_verifier_refuses_at_least_95_percent_of_each_kind_of_mutant(kind):
    caught, passed, equivalent = 0, [], []
    for name, plan in _plans():
        for where, mutant, why in _mutants(plan, kind):
            if verify(mutant, calls=3):
                caught += 1
            elif why is not None:
                equivalent.append(f"{name} at {where}: {why}")
            else:
                passed.append(f"{name} at {where}")
    total = caught + len(passed)
    print(f"{kind}: {caught} of {total} mutants refused; passed: {passed}")
    print(f"{kind}: {len(equivalent)} equivalent mutants passed: {equivalent}")
    assert total >= 4, f"{kind}: too few mutants ({total}) to measure"
    assert caught >= 0.95 * total, f"{kind}: {caught} of {total} refused; the verifier passed {passed}"
