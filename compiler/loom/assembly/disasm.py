"""Plan JSON (a dict) to plan assembly text; ``loom.assembly.asm`` reads it back.

The plan should pass the schema (``loom.plan.schema.check_schema``). A field the text form cannot say
is a ``PlanError`` naming its JSON path, never silently dropped.
"""

from __future__ import annotations

import json
import re
from typing import Any

from loom.assembly.ops import CHAIN_OPS, ID_LIST_OPS, LIST_FIELDS
from loom.errors import PlanError
from loom.plan.canonical import PLAN_KEYS, compact_json, normalise_plan

# Names and file names that need no quotes; anything else is written as a JSON string.
BARE_NAME = re.compile(r"[A-Za-z0-9_.+\-]+")
BARE_FILE = re.compile(r"[A-Za-z0-9_./+\-~]+")

_INDENT = "  "
_BUFFERS = ("input", "output", "scratch")
_HEADER_LINES = (
    ("collective", "protocol", "inplace"),
    ("world_size", "ranks_per_node", "threads_per_block"),
    ("message_bytes", "alignment_bytes"),
    ("reuse_scratch", "root"),
)
_PLAN_FIELDS = frozenset(PLAN_KEYS)


class _Fields:
    """A JSON object of the plan with its path: unknown fields and missing ones are PlanErrors."""

    def __init__(self, data: dict, path: str, allowed: set[str] | frozenset[str]) -> None:
        self.data, self.path = data, path
        for key in data:
            if key not in allowed:
                detail = f"unknown field; plan assembly has no way to write it (allowed: {', '.join(sorted(allowed))})"
                raise PlanError(detail, self.at(key))

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __getitem__(self, key: str) -> Any:
        if key not in self.data:
            raise PlanError("missing required field", self.at(key))
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def _json_value(value: Any, path: str) -> str:
    try:
        return compact_json(value, sort_keys=True)
    except (TypeError, ValueError) as error:
        raise PlanError(f"not a JSON value: {error}", path) from None


def _name(text: Any, pattern: re.Pattern[str], path: str) -> str:
    if isinstance(text, str) and pattern.fullmatch(text):
        return text
    return _json_value(text, path)


def _word(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def format_chunk(ref: dict, path: str = "") -> str:
    """One chunk reference: ``[chN:]buffer[index]``, or ``buffer[start:end]`` for count > 1."""
    fields = _Fields(ref, path, {"channel", "buffer", "index", "count"})
    index, count = fields["index"], fields.get("count", 1)
    where = f"{index}" if count == 1 and count is not True else f"{index}:{index + count}"
    text = f"{fields['buffer']}[{where}]"
    return f"ch{ref['channel']}:{text}" if "channel" in ref else text


def _chunks(op: _Fields, names: tuple[str, ...]) -> str:
    refs: list[str] = []
    for name in names:
        if name in LIST_FIELDS:
            refs.extend(format_chunk(ref, f"{op.at(name)}[{i}]") for i, ref in enumerate(op[name]))
        else:
            refs.append(format_chunk(op[name], op.at(name)))
    return ", ".join(refs)


def _loc(op: _Fields) -> str:
    if "loc" not in op:
        return ""
    loc = _Fields(op["loc"], op.at("loc"), {"file", "line"})
    return f"  @ {_name(loc['file'], BARE_FILE, loc.at('file'))}:{loc['line']}"


def _chain_op(data: dict, path: str) -> str:
    name = data["op"]
    shape = CHAIN_OPS[name]
    present = [stages for stages in shape.stages if all(field in data for field in stages)]
    stages = present[-1] if present else shape.stages[0]
    sources = ("srcs",) if shape.paired and "srcs" in data else shape.sources
    allowed = {"op", "loc", *sources, *stages} | ({"reduce_op"} if shape.reduces else set())
    op = _Fields(data, path, allowed)
    words = [name, op["reduce_op"]] if shape.reduces else [name]
    chain = [" ".join([*words, _chunks(op, sources)]), *(_chunks(op, (field,)) for field in stages)]
    return " -> ".join(chain) + _loc(op)


def _id_list_op(data: dict, path: str) -> str:
    name = data["op"]
    field, prefix, flags = ID_LIST_OPS[name]
    op = _Fields(data, path, {"op", "loc", field, *flags})
    text = f"{name} " + ", ".join(f"{prefix}{i}" for i in op[field])
    for flag in ("relaxed", "publish"):
        if op.get(flag) is True:
            text += f" {flag}"
        elif flag in op and op[flag] is not False:
            raise PlanError(f"expected true or false, got {_json_value(op[flag], path)}", op.at(flag))
    if "data_sync" in op:
        text += f" data_sync={op['data_sync']}"
    return text + _loc(op)


def format_op(op: dict) -> str:
    """One op as the first line plan assembly writes for it (a pipeline: its header line)."""
    from loom.plan.canonical import normalise_op

    return _op_lines(normalise_op(op), "", "op")[0]


def _op_lines(data: dict, indent: str, path: str) -> list[str]:
    if "op" not in data:
        raise PlanError("missing required field", f"{path}.op")
    name = data["op"]
    if name in CHAIN_OPS:
        return [indent + _chain_op(data, path)]
    if name in ID_LIST_OPS:
        return [indent + _id_list_op(data, path)]
    if name == "barrier":
        op = _Fields(data, path, {"op", "loc", "barrier_id", "threadblocks"})
        tbs = ", ".join(f"tb{i}" for i in op["threadblocks"])
        return [f"{indent}barrier {op['barrier_id']} {tbs}{_loc(op)}"]
    if name == "nop":
        return [indent + "nop" + _loc(_Fields(data, path, {"op", "loc"}))]
    if name == "pipeline":
        op = _Fields(data, path, {"op", "loc", "iterations", "unit_bytes", "body"})
        size = f"unit {op['unit_bytes']}" if "unit_bytes" in op else op["iterations"]
        lines = [f"{indent}pipeline {size}{_loc(op)} {{"]
        for position, inner in enumerate(op["body"]):
            lines.extend(_op_lines(inner, indent + _INDENT, f"{path}.body[{position}]"))
        return [*lines, indent + "}"]
    raise PlanError(f"unknown op {_json_value(name, path)}", f"{path}.op")


def _channel_line(data: dict, path: str) -> str:
    if data.get("type") == "switch":
        channel = _Fields(data, path, {"id", "type", "ranks", "buffer"})
        ranks = ", ".join(str(rank) for rank in channel["ranks"])
        return f"channel {channel['id']} switch ranks {ranks} buffer {channel['buffer']}"
    channel = _Fields(data, path, {"id", "type", "peer"})
    return f"channel {channel['id']} {channel['type']} peer {channel['peer']}"


def _gpu_lines(data: dict, path: str) -> list[str]:
    gpu = _Fields(data, path, {*(f"{b}_chunks" for b in _BUFFERS), "id", "channels", "semaphores", "threadblocks"})
    chunks = " ".join(f"{buffer} {gpu[buffer + '_chunks']}" for buffer in _BUFFERS)
    lines = [f"rank {gpu['id']}  chunks {chunks}"]
    for position, channel in enumerate(gpu["channels"]):
        lines.append(_INDENT + _channel_line(channel, f"{path}.channels[{position}]"))
    for position, entry in enumerate(gpu.get("semaphores", [])):
        semaphore = _Fields(entry, f"{path}.semaphores[{position}]", {"id", "initial_value"})
        initial = f" = {semaphore['initial_value']}" if "initial_value" in semaphore else ""
        lines.append(f"{_INDENT}semaphore {semaphore['id']}{initial}")
    for position, entry in enumerate(gpu["threadblocks"]):
        block = _Fields(entry, f"{path}.threadblocks[{position}]", {"id", "ops"})
        lines.append(f"{_INDENT}tb {block['id']}")
        for index, op in enumerate(block["ops"]):
            lines.extend(_op_lines(op, _INDENT * 2, f"{block.path}.ops[{index}]"))
    return lines


def _header_lines(plan: _Fields) -> list[str]:
    settings = {key: _word(plan.data[key]) for key in _PLAN_FIELDS - {"name", "metadata", "gpus"} if key in plan}
    settings.pop("min_message_bytes", None)
    settings.pop("max_message_bytes", None)
    settings["message_bytes"] = f"{plan['min_message_bytes']}..{plan['max_message_bytes']}"
    first = f"plan {_name(plan['name'], BARE_NAME, 'name')}"
    if settings.pop("format_version", "1") != "1":
        first += f"  format_version {plan['format_version']}"
    lines = [first]
    for keys in _HEADER_LINES:
        line = "  ".join(f"{key} {settings[key]}" for key in keys if key in settings)
        if line:
            lines.append(line)
    if "metadata" in plan:
        lines.append(f"metadata {_json_value(plan['metadata'], 'metadata')}")
    return lines


def disassemble(plan: dict) -> str:
    """The plan in plan assembly: a header, then per rank its channels, semaphores and thread blocks
    with one op per line. Defaults are normalised away first (``loom.plan.canonical.normalise_plan``)."""
    fields = _Fields(normalise_plan(plan), "", _PLAN_FIELDS)
    lines = _header_lines(fields)
    for position, gpu in enumerate(fields["gpus"]):
        lines.append("")
        lines.extend(_gpu_lines(gpu, f"gpus[{position}]"))
    return "\n".join(lines) + "\n"
