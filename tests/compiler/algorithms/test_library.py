"""Every library algorithm compiles, for every supported shape we test, into a plan that passes the
schema, is byte-for-byte reproducible, carries its provenance, and computes its collective
(the plan verifier, loom.verify, over three consecutive calls: postcondition, races, deadlocks)."""

from __future__ import annotations

import pytest
from library_cases import case_id, cases, options_for, plan_dict, plan_text, walk_ops
from loom.algorithms import ALGORITHMS
from loom.compiler.driver import compile_algorithm
from loom.plan.schema import check_schema
from loom.verify import format_findings, verify
from loom.version import __version__

try:
    from loom import _native
except ImportError as error:  # pragma: no cover - the native build is part of the normal set-up
    _native = None
    _NATIVE_MISSING = f"loom._native cannot be imported ({error}); build it with 'bash scripts/setup.sh'"
else:
    _NATIVE_MISSING = ""

needs_native = pytest.mark.skipif(_native is None, reason=_NATIVE_MISSING)

# 16-rank plans take longest to compile and verify: marked slow (`-m "not slow"` leaves them out).
CASES = [pytest.param(case, marks=pytest.mark.slow) if case[1] > 8 else case for case in cases()]
IDS = [case_id(case) for case in cases()]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_plan_header_schema_and_provenance(case):
    name, world_size, per_node, instances, inplace = case
    algorithm = ALGORITHMS[name]
    plan = plan_dict(*case)
    if world_size <= 4:
        # emit_plan_text already checks every plan against the schema; checking again here, on the
        # small shapes only, guards against that check going missing (jsonschema is slow: ~1 ms/op).
        check_schema(plan, name)
    assert plan["collective"] == algorithm.collective
    assert plan["protocol"] == algorithm.protocol
    assert plan["world_size"] == world_size
    assert plan["ranks_per_node"] == (per_node or world_size)
    assert plan["inplace"] is inplace
    assert (plan["min_message_bytes"], plan["max_message_bytes"]) == (
        algorithm.min_message_bytes,
        algorithm.max_message_bytes,
    )
    if name in ("broadcast", "reduce_read"):
        assert plan["root"] == world_size - 1
    metadata = plan["metadata"]
    assert metadata["compiler_version"] == __version__
    assert metadata["source_hash"].startswith("sha256:") and len(metadata["source_hash"]) == 7 + 64
    parameters = metadata["parameters"]
    assert parameters["algorithm"] == name
    assert parameters["instances"] == instances
    assert parameters["world_size"] == world_size
    assert parameters["options"]["min_message_size"] == algorithm.min_message_bytes
    assert sorted({gpu["id"] for gpu in plan["gpus"]}) == list(range(world_size))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_op_has_its_source_line(case):
    name = case[0]
    shared = {"allreduce_rs_ag_pipelined": "allreduce_rs_ag", "allgather_ring_port": "allgather_ring"}
    module = shared.get(name, ALGORITHMS[name].module)
    for gpu in plan_dict(*case)["gpus"]:
        assert gpu["threadblocks"], f"rank {gpu['id']} has no thread blocks"
        for tb in gpu["threadblocks"]:
            for op in walk_ops(tb["ops"]):
                assert op.get("loc"), f"rank {gpu['id']} tb {tb['id']}: {op['op']} has no loc"
                assert op["loc"]["file"] == f"loom/algorithms/{module}.py", op["loc"]
                assert op["loc"]["line"] > 0


# Algorithms that reach peers on their own node over port channels on purpose (copy-engine copies).
PORT_WITHIN_A_NODE = {"alltoall_port", "allgather_ring_port"}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_memory_channels_within_a_node_port_channels_across(case):
    plan = plan_dict(*case)
    per_node = plan["ranks_per_node"]
    for gpu in plan["gpus"]:
        for channel in gpu["channels"]:
            same_node = gpu["id"] // per_node == channel["peer"] // per_node
            wanted = "port" if case[0] in PORT_WITHIN_A_NODE or not same_node else "memory"
            assert channel["type"] == wanted, (gpu["id"], channel)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_verifies_over_three_calls(case):
    findings = verify(plan_dict(*case), calls=3)
    assert not findings, format_findings(findings)


@pytest.mark.parametrize("case", [c for c in cases() if c[1] <= 8 and c[3:] == (1, False)], ids=case_id)
def test_compiling_twice_gives_the_same_bytes(case):
    name, world_size, per_node, instances, inplace = case
    again = compile_algorithm(
        name, world_size, per_node, instances=instances, inplace=inplace, **options_for(name, world_size)
    )
    assert again == plan_text(*case)


@needs_native
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_native_decoder_accepts_the_plan(case):
    import loom

    text = plan_text(*case)
    decoded = loom.Plan.parse(text, case_id(case))
    assert decoded.world_size == case[1]
    assert decoded.collective == ALGORITHMS[case[0]].collective
    assert decoded.source_hash == plan_dict(*case)["metadata"]["source_hash"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_disassembly_assembles_back_to_the_same_bytes(case):
    from loom.assembly import assemble, disassemble
    from loom.plan.canonical import canonical_plan_text

    text = plan_text(*case)
    assert canonical_plan_text(assemble(disassemble(plan_dict(*case)), case_id(case), check=True)) == text
