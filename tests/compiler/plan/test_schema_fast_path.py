"""check_schema validates a plan part by part (the plan without its ops, then each op against its
own op schema). That must accept exactly what the whole-document validation accepts."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
from loom.plan import schema

DATA = Path(__file__).resolve().parents[2] / "data" / "plans"
PLANS = sorted((DATA / "malformed").glob("*.json")) + sorted((DATA / "good").glob("*.json"))
PLANS += sorted((Path(__file__).resolve().parents[3] / "examples" / "plans").glob("*.json"))
KITCHEN_SINK = DATA / "good" / "kitchen_sink_ll.json"


def _load(path: Path):
    try:
        return json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        return None


def _agrees(document) -> bool:
    return schema._valid_by_parts(document) == schema._validator().is_valid(document)


@pytest.mark.parametrize("path", PLANS, ids=[p.name for p in PLANS])
def test_parts_agree_with_the_whole_on_the_corpus(path: Path) -> None:
    document = _load(path)
    if document is None:
        pytest.skip("not JSON: the syntax check rejects it before the schema")
    assert _agrees(document)


def _mutate(document, rng: random.Random) -> None:
    """Change one random value deep in the document: a wrong type, a bad number, a missing or extra key."""
    node = document
    while True:
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        if not children:
            return
        key, value = rng.choice(children)
        if isinstance(value, (dict, list)) and value and rng.random() < 0.8:
            node = value
            continue
        choice = rng.randrange(5)
        if choice == 0:
            node[key] = "x"
        elif choice == 1:
            node[key] = -1
        elif choice == 2 and isinstance(node, dict):
            del node[key]
        elif choice == 3 and isinstance(node, dict):
            node["unexpected"] = 1
        else:
            node[key] = 4294967296
        return


def test_parts_agree_with_the_whole_on_mutated_plans() -> None:
    original = json.loads(KITCHEN_SINK.read_text())
    rng = random.Random(7)
    invalid = 0
    for _ in range(300):
        document = copy.deepcopy(original)
        _mutate(document, rng)
        assert _agrees(document), json.dumps(document)[:200]
        invalid += not schema._validator().is_valid(document)
    assert invalid > 150  # the mutations do reach the schema's rules
