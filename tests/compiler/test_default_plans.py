"""The committed default plans (plans/default): current, schema-valid, uniquely named, covering every size."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from loom.algorithms import ALGORITHMS, GiB
from loom.algorithms.tuned_sizes import rows_for_shape
from loom.plan.schema import check_schema

REPO = Path(__file__).resolve().parents[2]
PLANS = REPO / "plans" / "default"


def _load_generator():
    spec = importlib.util.spec_from_file_location("build_default_plans", REPO / "plans" / "build_default_plans.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


generator = _load_generator()


def _committed() -> dict[str, dict]:
    return {path.name: json.loads(path.read_text(encoding="utf-8")) for path in sorted(PLANS.glob("*.json"))}


@pytest.mark.slow
def test_committed_plans_are_what_the_generator_makes():
    # Regenerates every plan (verifying each), in one process per CPU: ~15 s on 2 cores.
    assert generator.check(PLANS) == [], "run python plans/build_default_plans.py"


def test_the_folder_holds_exactly_the_plan_set():
    expected = sorted(plan.file_name for plan in generator.default_plans())
    assert sorted(_committed()) == expected


@pytest.mark.slow
def test_every_plan_passes_the_schema_and_is_named_after_its_file():
    # ~15 s: jsonschema over 11 MiB of plans.
    plans = _committed()
    for file_name, plan in plans.items():
        check_schema(plan, file_name)
        assert f"{plan['name']}.json" == file_name
    names = [plan["name"] for plan in plans.values()]
    assert len(set(names)) == len(names)


def test_names_say_algorithm_shape_range_and_in_place():
    # The 2-rank in-place all-reduce of the smallest messages, whatever the tuned table makes its range.
    [(file_name, plan)] = [
        (name, plan)
        for name, plan in _committed().items()
        if (plan["collective"], plan["world_size"], plan["ranks_per_node"], plan["inplace"], plan["min_message_bytes"])
        == ("allreduce", 2, 2, True, 0)
    ]
    algorithm = plan["metadata"]["parameters"]["algorithm"]
    assert file_name == f"{algorithm}_2r_0_{plan['max_message_bytes']}_inplace.json"
    two_nodes = _committed()["allgather_fullmesh_2x4_131073_1073741824.json"]
    assert (two_nodes["world_size"], two_nodes["ranks_per_node"], two_nodes["inplace"]) == (8, 4, False)


def test_every_message_size_has_exactly_one_plan_per_collective_and_shape():
    ranges = defaultdict(list)
    for plan in _committed().values():
        key = (plan["collective"], plan["world_size"], plan["ranks_per_node"], plan["inplace"])
        ranges[key].append((plan["min_message_bytes"], plan["max_message_bytes"]))
    collectives = {algorithm.collective for algorithm in ALGORITHMS.values()}
    shapes = {(world_size, per_node) for world_size, per_node in generator.SHAPES}
    assert {key[0] for key in ranges} == collectives | {"alltoallv"}
    assert {(key[1], key[2]) for key in ranges} == shapes | {(2, 1)}  # (2, 1): counted plans only
    # Every collective on every shape, in and out of place, but reduce across nodes (reduce_read: one node);
    # all-to-all-v out of place, on these shapes and on two nodes of one rank (a send/recv pair's link).
    expected = {
        (ALGORITHMS[row[0]].collective, world_size, per_node, inplace)
        for world_size, per_node in generator.SHAPES
        for row in rows_for_shape(world_size, per_node)
        for inplace in (False, True)
    }
    counted = {("alltoallv", world_size, per_node, False) for world_size, per_node in generator.COUNTED_SHAPES}
    assert set(ranges) == expected | counted
    ranges = {key: spans for key, spans in ranges.items() if key not in counted}
    assert len(expected) == (len(collectives) * len(shapes) - 3) * 2
    for key, spans in ranges.items():
        spans.sort()
        assert spans[0][0] == 0, key
        assert spans[-1][1] == GiB, key
        for (_, high), (low, _) in zip(spans, spans[1:], strict=False):
            assert low == high + 1, (key, spans)


def test_the_folder_stays_small():
    total = sum(path.stat().st_size for path in PLANS.glob("*.json"))
    # ~33 MiB since the 2- and 4-rank tables were measured with the wider grid and all-to-all rows (more
    # size ranges; a 4-rank bandwidth plan of 64 instances is ~0.5 MiB, indented JSON): the bound catches
    # runaway growth, not that.
    assert total < 40 << 20, f"plans/default is {total / 2**20:.1f} MiB"


def test_the_native_decoder_loads_every_plan():
    native = pytest.importorskip("loom._native", reason="the native module is not built")
    for path in sorted(PLANS.glob("*.json")):
        native.Plan.load(str(path))
