"""The one canonical JSON text of a plan, written the same way by every Loom tool.

``canonical_plan_text(plan)`` first normalises the plan (``normalise_plan``): keys go in schema
order, metadata keys are sorted, and fields that only restate the schema's default are dropped —
a chunk reference's ``count: 1``, an op's ``relaxed: false`` and ``data_sync: "both"``, the plan's
``reuse_scratch: false`` — as is an empty ``semaphores`` list (the same as none). Every other field
is kept exactly as given. The layout: 2-space indentation, and each channel, semaphore and op (other
than a pipeline, whose body ops get a line each) on one line, so that diffs show what changed.

Fields the schema does not know are kept, after the known ones in sorted order, so that the schema
check still reports them.
"""

from __future__ import annotations

import json
from typing import Any

PLAN_KEYS = (
    "format_version",
    "name",
    "collective",
    "protocol",
    "inplace",
    "world_size",
    "ranks_per_node",
    "threads_per_block",
    "min_message_bytes",
    "max_message_bytes",
    "alignment_bytes",
    "reuse_scratch",
    "root",
    "metadata",
    "gpus",
)
GPU_KEYS = ("id", "input_chunks", "output_chunks", "scratch_chunks", "channels", "semaphores", "threadblocks")
CHANNEL_KEYS = ("id", "type", "peer", "ranks", "buffer")
SEMAPHORE_KEYS = ("id", "initial_value")
THREADBLOCK_KEYS = ("id", "ops")
OP_KEYS = (
    "op",
    "reduce_op",
    "src",
    "srcs",
    "dst",
    "packet_dst",
    "dsts",
    "channels",
    "relaxed",
    "publish",
    "data_sync",
    "barrier_id",
    "threadblocks",
    "semaphores",
    "iterations",
    "unit_bytes",
    "body",
    "loc",
)
CHUNK_KEYS = ("channel", "buffer", "index", "count")
LOC_KEYS = ("file", "line")

_CHUNK_FIELDS = ("src", "dst", "packet_dst")
_CHUNK_LIST_FIELDS = ("srcs", "dsts")


def _is(value: Any, kind: type, expected: Any) -> bool:
    """value == expected with the exact type: True is not the count 1, 1 is not True."""
    return type(value) is kind and value == expected


def _ordered(data: dict, keys: tuple[str, ...]) -> dict:
    out = {key: data[key] for key in keys if key in data}
    out.update((key, data[key]) for key in sorted(set(data) - set(keys)))
    return out


def _sorted_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted_json(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_json(item) for item in value]
    return value


def _chunk(ref: Any) -> Any:
    if not isinstance(ref, dict):
        return ref
    out = _ordered(ref, CHUNK_KEYS)
    if _is(out.get("count"), int, 1):
        del out["count"]
    return out


def normalise_op(op: Any) -> Any:
    """One op in normal form: known keys in order, defaults dropped (as canonical_plan_text writes it)."""
    return _op(op)


def _op(op: Any) -> Any:
    if not isinstance(op, dict):
        return op
    out = _ordered(op, OP_KEYS)
    for field in _CHUNK_FIELDS:
        if field in out:
            out[field] = _chunk(out[field])
    for field in _CHUNK_LIST_FIELDS:
        if isinstance(out.get(field), list):
            out[field] = [_chunk(ref) for ref in out[field]]
    if _is(out.get("relaxed"), bool, False):
        del out["relaxed"]
    if _is(out.get("publish"), bool, False):
        del out["publish"]
    if _is(out.get("data_sync"), str, "both"):
        del out["data_sync"]
    if isinstance(out.get("body"), list):
        out["body"] = [_op(inner) for inner in out["body"]]
    if isinstance(out.get("loc"), dict):
        out["loc"] = _ordered(out["loc"], LOC_KEYS)
    return out


def _list_of(items: Any, keys: tuple[str, ...]) -> Any:
    if not isinstance(items, list):
        return items
    return [_ordered(item, keys) if isinstance(item, dict) else item for item in items]


def _gpu(gpu: Any) -> Any:
    if not isinstance(gpu, dict):
        return gpu
    out = _ordered(gpu, GPU_KEYS)
    if "channels" in out:
        out["channels"] = _list_of(out["channels"], CHANNEL_KEYS)
    if out.get("semaphores") == []:
        del out["semaphores"]
    elif "semaphores" in out:
        out["semaphores"] = _list_of(out["semaphores"], SEMAPHORE_KEYS)
    if isinstance(out.get("threadblocks"), list):
        blocks = _list_of(out["threadblocks"], THREADBLOCK_KEYS)
        for block in blocks:
            if isinstance(block, dict) and isinstance(block.get("ops"), list):
                block["ops"] = [_op(op) for op in block["ops"]]
        out["threadblocks"] = blocks
    return out


def normalise_plan(plan: dict) -> dict:
    """A copy of the plan in canonical form: keys in schema order, defaults dropped (module doc)."""
    out = _ordered(plan, PLAN_KEYS)
    if _is(out.get("reuse_scratch"), bool, False):
        del out["reuse_scratch"]
    if "metadata" in out:
        out["metadata"] = _sorted_json(out["metadata"])
    if isinstance(out.get("gpus"), list):
        out["gpus"] = [_gpu(gpu) for gpu in out["gpus"]]
    return out


def _escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def compact_json(value: Any, sort_keys: bool = False) -> str:
    """One-line JSON that keeps non-ASCII text readable. Characters that do not print, among them
    those some tools take as line breaks (U+2028, U+0085), become \\u escapes: a line stays a line.
    Raises ValueError for values JSON cannot hold (NaN, infinities)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=sort_keys, allow_nan=False)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _compact(value: Any) -> str:
    return compact_json(value)


def _lines_of_list(items: list, indent: str, item_lines) -> list[str]:
    """A JSON array with one item (as item_lines renders it) per line or block, or [] when empty."""
    if not items:
        return ["[]"]
    lines = ["["]
    for position, item in enumerate(items):
        block = item_lines(item, indent + "  ")
        block[0] = indent + "  " + block[0]
        if position < len(items) - 1:
            block[-1] += ","
        lines.extend(block)
    lines.append(indent + "]")
    return lines


def _lines_of_object(data: dict, indent: str, field_lines) -> list[str]:
    """A JSON object with one field per line; field_lines renders a value as lines."""
    if not data:
        return ["{}"]
    lines = ["{"]
    keys = list(data)
    for position, key in enumerate(keys):
        block = field_lines(key, data[key], indent + "  ")
        block[0] = f"{indent}  {_compact(key)}: {block[0]}"
        if position < len(keys) - 1:
            block[-1] += ","
        lines.extend(block)
    lines.append(indent + "}")
    return lines


def _one_line(value: Any, indent: str = "") -> list[str]:
    return [_compact(value)]


def _op_lines(op: Any, indent: str) -> list[str]:
    if isinstance(op, dict) and op.get("op") == "pipeline" and isinstance(op.get("body"), list):
        return _lines_of_object(op, indent, _pipeline_field_lines)
    return [_compact(op)]


def _pipeline_field_lines(key: str, value: Any, indent: str) -> list[str]:
    if key == "body" and isinstance(value, list):
        return _lines_of_list(value, indent, _op_lines)
    return [_compact(value)]


def _threadblock_field_lines(key: str, value: Any, indent: str) -> list[str]:
    if key == "ops" and isinstance(value, list):
        return _lines_of_list(value, indent, _op_lines)
    return [_compact(value)]


def _threadblock_lines(block: Any, indent: str) -> list[str]:
    if not isinstance(block, dict):
        return [_compact(block)]
    return _lines_of_object(block, indent, _threadblock_field_lines)


def _gpu_field_lines(key: str, value: Any, indent: str) -> list[str]:
    if not isinstance(value, list):
        return [_compact(value)]
    if key in ("channels", "semaphores"):
        return _lines_of_list(value, indent, _one_line)
    if key == "threadblocks":
        return _lines_of_list(value, indent, _threadblock_lines)
    return [_compact(value)]


def _gpu_lines(gpu: Any, indent: str) -> list[str]:
    if not isinstance(gpu, dict):
        return [_compact(gpu)]
    return _lines_of_object(gpu, indent, _gpu_field_lines)


def _plan_field_lines(key: str, value: Any, indent: str) -> list[str]:
    if key == "metadata" and isinstance(value, dict):
        return _lines_of_object(value, indent, lambda _key, item, _indent: [_compact(item)])
    if key == "gpus" and isinstance(value, list):
        return _lines_of_list(value, indent, _gpu_lines)
    return [_compact(value)]


def canonical_plan_text(plan: dict) -> str:
    """The plan as canonical JSON text (normalised, laid out as the module doc says), ending in a newline.

    Equal plans give equal bytes: canonical_plan_text(json.loads(canonical_plan_text(p))) is the same
    text, and so is the text of any plan that differs from p only in key order or dropped defaults.
    """
    return "\n".join(_lines_of_object(normalise_plan(plan), "", _plan_field_lines)) + "\n"
