"""MSCCL++'s TestCollective: programs that exercise single ops compile and verify (races, deadlocks,
bounds and packets: there is no postcondition), buffers of 0 chunks are allowed for them only, and the
executor refuses to run such a plan, saying why."""

from __future__ import annotations

import copy
import json

import loom
import pytest
from loom.errors import LoomError
from loom.language import CollectiveProgram, MemoryChannel, Rank, TestCollective
from loom.plan.schema import check_schema
from loom.verify import verify


def _copy_program() -> dict:
    with CollectiveProgram("copy_test", TestCollective(1, 1, 1), 1, protocol="Simple") as program:
        rank = Rank(0)
        rank.copy(rank.get_output_buffer()[0:1], rank.get_input_buffer()[0:1], tb=0)
    return json.loads(program.to_json())


def test_a_single_op_program_compiles_and_verifies_without_a_postcondition():
    plan = _copy_program()
    assert plan["collective"] == "test" and plan["gpus"][0]["input_chunks"] == 1
    assert verify(plan) == []


def test_buffers_of_no_chunks_are_allowed_for_a_test_plan_only():
    with CollectiveProgram("signal_wait_test", TestCollective(2, 0, 0), 2) as program:
        for r in range(2):
            channel = MemoryChannel(1 - r, r)
            channel.signal(tb=0)
            channel.wait(tb=0)
    plan = json.loads(program.to_json())
    assert plan["gpus"][1]["output_chunks"] == 0 and verify(plan) == []
    plan["collective"] = "allreduce"
    with pytest.raises(LoomError, match=r"gpus\[\d\]\.(in|out)put_chunks: 0 is less than the minimum of 1"):
        check_schema(plan)


def test_the_verifier_still_finds_races_in_a_test_plan():
    plan = _copy_program()
    second = copy.deepcopy(plan["gpus"][0]["threadblocks"][0])
    second["id"] = 1
    plan["gpus"][0]["threadblocks"].append(second)  # two thread blocks write output chunk 0 unordered
    findings = verify(plan)
    assert findings and {finding.category for finding in findings} == {"race"}, findings


def test_the_executor_refuses_to_run_a_test_plan_and_says_why():
    with pytest.raises(LoomError, match=r"collective: a test plan \(MSCCL\+\+'s TestCollective\) has no collective"):
        loom.Plan.parse(json.dumps(_copy_program()))


def test_sizes_must_be_non_negative_chunk_counts():
    with pytest.raises(ValueError, match="output_size must be a non-negative integer"):
        TestCollective(2, 1, -1)
