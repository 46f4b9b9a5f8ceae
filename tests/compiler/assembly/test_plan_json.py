"""canonical_plan_text: the one JSON writer of Loom — deterministic, keys in schema order, one op a line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from loom.plan.canonical import (
    CHUNK_KEYS,
    GPU_KEYS,
    OP_KEYS,
    PLAN_KEYS,
    canonical_plan_text,
    compact_json,
    normalise_plan,
)
from loom.plan.schema import plan_schema

REPO = Path(__file__).resolve().parents[3]
KITCHEN_SINK = REPO / "tests" / "data" / "plans" / "good" / "kitchen_sink_ll.json"
PLANS = sorted((REPO / "examples" / "plans").glob("*.json")) + [KITCHEN_SINK]


def _shuffled(value, rng: random.Random):
    """The same JSON value with every object's keys in a random order."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {key: _shuffled(value[key], rng) for key in keys}
    if isinstance(value, list):
        return [_shuffled(item, rng) for item in value]
    return value


@pytest.mark.parametrize("path", PLANS, ids=[p.name for p in PLANS])
def test_key_order_of_the_input_does_not_matter(path: Path) -> None:
    plan = json.loads(path.read_text(encoding="utf-8"))
    text = canonical_plan_text(plan)
    for seed in range(5):
        assert canonical_plan_text(_shuffled(plan, random.Random(seed))) == text
    assert canonical_plan_text(json.loads(text)) == text  # a fixed point
    assert json.loads(text) == normalise_plan(plan)
    assert text.endswith("}\n") and not text.endswith("\n\n")


def test_keys_follow_the_schema_order() -> None:
    plan = _shuffled(json.loads(KITCHEN_SINK.read_text(encoding="utf-8")), random.Random(1))
    normal = normalise_plan(plan)
    assert list(normal) == [key for key in PLAN_KEYS if key in plan]
    assert list(normal["metadata"]) == sorted(plan["metadata"])
    gpu = normal["gpus"][0]
    assert list(gpu) == list(GPU_KEYS)
    assert [list(c) for c in gpu["channels"]] == [
        ["id", "type", "peer"],
        ["id", "type", "peer"],
        ["id", "type", "ranks", "buffer"],
    ]
    for op in gpu["threadblocks"][0]["ops"] + gpu["threadblocks"][1]["ops"]:
        assert list(op) == [key for key in OP_KEYS if key in op]
        for field in ("src", "dst", "packet_dst"):
            if field in op:
                assert list(op[field]) == [key for key in CHUNK_KEYS if key in op[field]]
    # Every field the schema allows has its place in the order.
    assert set(PLAN_KEYS) == set(plan_schema()["properties"])
    assert set(GPU_KEYS) == set(plan_schema()["$defs"]["gpu"]["properties"])
    op_fields = {key for op in plan_schema()["$defs"]["ops"].values() for key in op["properties"]}
    assert op_fields == set(OP_KEYS)


def test_layout_one_line_per_channel_semaphore_and_op() -> None:
    text = canonical_plan_text(json.loads(KITCHEN_SINK.read_text(encoding="utf-8")))
    lines = text.splitlines()
    assert lines[:3] == ["{", '  "format_version": 1,', '  "name": "kitchen_sink_ll",']
    assert '        {"id": 2, "type": "switch", "ranks": [0, 1], "buffer": "output"}' in lines
    assert '        {"id": 1, "initial_value": 3}' in lines
    assert '            {"op": "wait", "channels": [0, 1], "relaxed": true, "data_sync": "after"},' in lines
    pipeline = lines.index('              "op": "pipeline",')
    assert lines[pipeline - 1 : pipeline + 4] == [
        "            {",
        '              "op": "pipeline",',
        '              "iterations": 4,',
        '              "body": [',
        '                {"op": "copy", "src": {"buffer": "input", "index": 0, "count": 2}, '
        '"dst": {"buffer": "output", "index": 0, "count": 2}},',
    ]
    assert '    "parameters": {"instances": 1},' in lines
    assert all(line == line.rstrip() for line in lines)
    assert all((len(line) - len(line.lstrip(" "))) % 2 == 0 for line in lines)


def test_defaults_are_dropped_and_other_fields_kept() -> None:
    plan = {
        "gpus": [
            {
                "id": 0,
                "semaphores": [],
                "threadblocks": [
                    {
                        "id": 0,
                        "ops": [
                            {
                                "op": "copy",
                                "src": {"index": 0, "buffer": "input", "count": 1},
                                "dst": {"buffer": "output", "index": 0, "count": 2},
                            },
                            {"op": "signal", "channels": [0], "relaxed": False, "data_sync": "both"},
                            {"op": "wait", "channels": [0], "relaxed": True, "data_sync": "none"},
                        ],
                    }
                ],
            }
        ],
        "reuse_scratch": False,
        "name": "x",
        "zzz_unknown": 1,
        "metadata": {"b": {"d": 1, "c": 2}, "a": []},
    }
    normal = normalise_plan(plan)
    assert list(normal) == ["name", "metadata", "gpus", "zzz_unknown"]
    assert list(normal["metadata"]) == ["a", "b"] and list(normal["metadata"]["b"]) == ["c", "d"]
    ops = normal["gpus"][0]["threadblocks"][0]["ops"]
    assert ops[0] == {
        "op": "copy",
        "src": {"buffer": "input", "index": 0},
        "dst": {"buffer": "output", "index": 0, "count": 2},
    }
    assert ops[1] == {"op": "signal", "channels": [0]}
    assert ops[2] == {"op": "wait", "channels": [0], "relaxed": True, "data_sync": "none"}
    assert "semaphores" not in normal["gpus"][0]
    assert plan["reuse_scratch"] is False and plan["gpus"][0]["semaphores"] == []  # the input is left alone
    # A count of true is not the count 1: the schema must still see (and reject) it.
    assert normalise_plan({"gpus": [{"threadblocks": [{"ops": [{"op": "copy", "src": {"count": True}}]}]}]})["gpus"][0][
        "threadblocks"
    ][0]["ops"][0]["src"] == {"count": True}


def test_compact_json_keeps_lines_whole() -> None:
    assert compact_json({"a": "é ü"}) == '{"a": "é ü"}'
    assert compact_json({"a": "x\u2028y\x85z\x7f\U000e0001"}) == '{"a": "x\\u2028y\\u0085z\\u007f\\udb40\\udc01"}'
    assert json.loads(compact_json({"a": "x\u2028y\U000e0001"})) == {"a": "x\u2028y\U000e0001"}
    with pytest.raises(ValueError):
        compact_json({"a": float("nan")})
