"""Plan assembly: disasm -> asm gives back the same plan, byte for byte once written canonically.

Golden files under data/: the kitchen-sink plan's disassembly (every op of the vocabulary) and a
hand-written text with the plan JSON it must assemble to.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from loom.assembly import assemble, assemble_file, disassemble, format_chunk
from loom.assembly.asm import GRAMMAR_PATH
from loom.assembly.ops import ALL_OPS
from loom.errors import PlanError
from loom.plan.canonical import canonical_plan_text, normalise_plan
from loom.plan.schema import check_schema, plan_schema

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parent / "data"
KITCHEN_SINK = REPO / "tests" / "data" / "plans" / "good" / "kitchen_sink_ll.json"
PLANS = sorted((REPO / "examples" / "plans").glob("*.json")) + sorted(KITCHEN_SINK.parent.glob("*.json"))


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _ops(plan: dict):
    for gpu in plan["gpus"]:
        for block in gpu["threadblocks"]:
            for op in block["ops"]:
                yield op
                yield from op.get("body", [])


@pytest.mark.parametrize("path", PLANS, ids=[p.name for p in PLANS])
def test_round_trip_is_byte_identical(path: Path) -> None:
    plan = _load(path)
    text = disassemble(plan)
    assembled = assemble(text, path.name)
    assert canonical_plan_text(assembled) == canonical_plan_text(plan)
    assert assembled == normalise_plan(plan)
    check_schema(assembled)
    # The text is a fixed point too: disassembling the assembled plan gives the same text.
    assert disassemble(assembled) == text


def test_the_corpus_uses_every_op_and_every_channel_type() -> None:
    used = {op["op"] for path in PLANS for op in _ops(_load(path))}
    assert used == set(plan_schema()["$defs"]["op_name"]["enum"]) == set(ALL_OPS)
    channel_types = {c["type"] for path in PLANS for gpu in _load(path)["gpus"] for c in gpu["channels"]}
    assert channel_types == {"memory", "port", "switch"}


def test_kitchen_sink_disassembly_matches_the_golden_file() -> None:
    assert disassemble(_load(KITCHEN_SINK)) == (DATA / "kitchen_sink_ll.txt").read_text(encoding="utf-8")


def test_hand_written_text_assembles_to_the_known_plan() -> None:
    plan = assemble_file(DATA / "broadcast_handwritten.txt")
    expected = (DATA / "broadcast_handwritten.json").read_text(encoding="utf-8")
    assert canonical_plan_text(plan) == expected
    assert plan == json.loads(expected)
    assert "reuse_scratch" not in plan  # "reuse_scratch false" is the default
    assert plan["metadata"]["description"] == "hand-written # not a comment"


def test_windows_line_ends_and_a_missing_final_newline_are_fine() -> None:
    text = (DATA / "broadcast_handwritten.txt").read_text(encoding="utf-8")
    assert assemble(text.replace("\n", "\r\n").rstrip()) == assemble(text)


def test_every_optional_field_round_trips() -> None:
    plan = _load(REPO / "examples" / "plans" / "allreduce_2r_simple.json")
    plan.update(name="all fields: ünï", collective="broadcast", root=1, reuse_scratch=True, format_version=1)
    plan["metadata"] = {"z": [1.5, -2e-07, None, True, {}], "a": 'line\u2028break\ttab "q" #'}
    gpu = plan["gpus"][1]
    gpu["semaphores"] = [{"id": 4}, {"id": 5, "initial_value": 7}]
    gpu["threadblocks"][0]["ops"] += [
        {"op": "wait", "channels": [0], "relaxed": True, "data_sync": "none", "loc": {"file": "a:b c.py", "line": 3}},
        {"op": "sem_release", "semaphores": [5, 4], "data_sync": "before"},
        {"op": "pipeline", "iterations": 3, "loc": {"file": "p.py", "line": 9}, "body": [{"op": "nop"}]},
        {"op": "pipeline", "unit_bytes": 1048576, "body": [{"op": "nop"}]},
    ]
    text = disassemble(plan)
    assert 'plan "all fields: ünï"' in text
    assert "reuse_scratch true  root 1" in text
    assert '    wait ch0 relaxed data_sync=none  @ "a:b c.py":3\n' in text
    assert "    pipeline 3  @ p.py:9 {\n      nop\n    }\n" in text
    assert "    pipeline unit 1048576 {\n      nop\n    }\n" in text
    assert "\\u2028" in text  # a line of the text stays one line
    assert assemble(text) == normalise_plan(plan)


def test_defaults_are_normalised_away() -> None:
    plan = _load(REPO / "examples" / "plans" / "allreduce_2r_simple.json")
    plan["reuse_scratch"] = False
    ops = plan["gpus"][0]["threadblocks"][0]["ops"]
    ops[0]["src"]["count"] = 1
    ops[1].update(relaxed=False, data_sync="both")
    plan["gpus"][0]["semaphores"] = []
    normal = normalise_plan(plan)
    assert "reuse_scratch" not in normal and "semaphores" not in normal["gpus"][0]
    normal_ops = normal["gpus"][0]["threadblocks"][0]["ops"]
    assert normal_ops[0]["src"] == {"buffer": "input", "index": 1}
    assert normal_ops[1] == {"op": "signal", "channels": [0]}
    assert assemble(disassemble(plan)) == normal
    assert canonical_plan_text(plan) == canonical_plan_text(
        _load(REPO / "examples" / "plans" / "allreduce_2r_simple.json")
    )


@pytest.mark.parametrize(
    ("ref", "text"),
    [
        ({"buffer": "input", "index": 3}, "input[3]"),
        ({"buffer": "input", "index": 3, "count": 1}, "input[3]"),
        ({"buffer": "output", "index": 2, "count": 4}, "output[2:6]"),
        ({"channel": 7, "buffer": "scratch", "index": 0}, "ch7:scratch[0]"),
        ({"channel": 1, "buffer": "scratch", "index": 4, "count": 2}, "ch1:scratch[4:6]"),
    ],
)
def test_format_chunk(ref: dict, text: str) -> None:
    assert format_chunk(ref) == text


def test_disassemble_refuses_fields_it_cannot_write() -> None:
    plan = _load(REPO / "examples" / "plans" / "allreduce_2r_simple.json")
    broken = copy.deepcopy(plan)
    broken["gpus"][0]["threadblocks"][0]["ops"][1]["iterations"] = 2
    with pytest.raises(PlanError) as caught:
        disassemble(broken)
    assert caught.value.path == "gpus[0].threadblocks[0].ops[1].iterations"
    broken = copy.deepcopy(plan)
    broken["gpus"][1]["threadblocks"][0]["ops"][0]["src"]["offset"] = 2
    with pytest.raises(PlanError) as caught:
        disassemble(broken)
    assert caught.value.path == "gpus[1].threadblocks[0].ops[0].src.offset"
    broken = copy.deepcopy(plan)
    broken["gpus"][0]["threadblocks"][0]["ops"][0]["op"] = "teleport"
    with pytest.raises(PlanError, match="unknown op"):
        disassemble(broken)


def test_the_grammar_ships_inside_the_package() -> None:
    import loom

    package = Path(loom.__file__).resolve().parent
    assert GRAMMAR_PATH.is_file()
    assert GRAMMAR_PATH.resolve() == package / "assembly" / "grammar.lark"
