"""loom.verify's API: findings and their text, calls, bounds and shapes outside the decoder's
reach, switch channels, and what compile does with a wrong plan."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from loom.assembly import assemble, assemble_file
from loom.compiler.driver import compile_file
from loom.errors import InvalidArgumentError, PlanError
from loom.verify import Finding, VerificationError, check, format_findings, summary, verify, verify_file

DATA = Path(__file__).with_name("data")
ROOT = Path(__file__).resolve().parents[3]


def _good(name: str) -> dict:
    return assemble_file(DATA / f"{name}.txt")


def _ops(plan: dict, rank: int, tb: int = 0) -> list[dict]:
    return plan["gpus"][rank]["threadblocks"][tb]["ops"]


def test_finding_text_names_the_op_in_plan_assembly_and_its_source_line():
    plan = _good("allreduce_2r")
    _ops(plan, 1)[3]["srcs"][0]["index"] = 0  # reduce input[0] instead of input[1]
    finding, forwarded = verify(plan)
    assert finding == Finding(
        "postcondition",
        1,
        0,
        3,
        "rank 1 output[1] holds {r0:input[1], r1:input[0]}; expected {r0:input[1], r1:input[1]}:"
        " r1:input[0] does not belong here; missing r1:input[1]",
        "reduce sum input[0], scratch[0] -> output[1]",
        "allreduce_2r.py:13",
        None,
        0,
    )
    assert finding.where == "rank 1 tb 0 op 3"
    assert forwarded.where == "rank 1 tb 0 op 5"  # the put that took the wrong sum to rank 0
    assert forwarded.message.startswith("rank 0 output[1] holds {r0:input[1], r1:input[0]}")
    assert forwarded.message.endswith(
        "; the contents were computed by rank 1 tb 0 op 3 (reduce sum input[0], scratch[0] -> output[1])"
    )
    assert str(finding).splitlines() == [
        f"rank 1 tb 0 op 3: postcondition: {finding.message}",
        "    reduce sum input[0], scratch[0] -> output[1]  @ allreduce_2r.py:13",
    ]


def test_loom_verify_is_lazy_and_callable():
    code = "import sys, loom; print('loom.verify' in sys.modules); print(loom.verify(json.load(open(sys.argv[1]))))"
    path = ROOT / "examples" / "plans" / "allreduce_2r_simple.json"
    result = subprocess.run(
        [sys.executable, "-c", "import json; " + code, str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.split() == ["False", "[]"], result.stderr


def test_calls_must_be_positive():
    with pytest.raises(InvalidArgumentError, match="calls must be a positive integer, got 0"):
        verify(_good("allreduce_2r"), calls=0)


def test_more_calls_find_cross_call_races():
    """An all-gather without a handshake (the example plan before it got one): one call is right,
    the next may overwrite the previous result before the user has read it. The inductive step runs the
    later calls whatever number is asked for, so one call run finds it too."""
    path = ROOT / "tests" / "compiler" / "verify" / "data" / "allgather_4r_no_handshake.json"
    for calls in (1, 2):
        races = [f for f in verify_file(path, calls=calls) if f.category == "race"]
        assert races and all("the user's read of the result" in f.message for f in races)
        assert all(f.call == 1 for f in races)


def test_check_raises_with_the_findings():
    plan = _good("allreduce_2r")
    del _ops(plan, 0)[2]  # the first wait
    with pytest.raises(VerificationError) as caught:
        check(plan)
    assert caught.value.findings == verify(plan)
    assert str(caught.value).startswith("plan allreduce_2r fails verification, 8 findings: 6 race, 2 postcondition\n")


def test_format_findings_limits_per_category_and_rank():
    findings = [Finding("race", 0, 0, i, f"m{i}") for i in range(4)] + [Finding("race", 1, 0, 0, "x")]
    text = format_findings(findings, limit=2)
    assert text.splitlines() == [
        "rank 0 tb 0 op 0: race: m0",
        "rank 0 tb 0 op 1: race: m1",
        "rank 1 tb 0 op 0: race: x",
        "... and 2 more race finding(s) on rank 0",
    ]
    assert summary(findings) == "5 findings: 5 race"


def test_out_of_range_references_the_decoder_would_refuse():
    plan = _good("allreduce_2r")
    _ops(plan, 0)[0]["src"]["count"] = 2  # input[1:3]
    _ops(plan, 1)[0]["dsts"][0]["channel"] = 7
    bounds = [f for f in verify(plan) if f.category == "bounds"]
    assert [(f.where, f.message) for f in bounds] == [
        ("rank 0 tb 0 op 0", "its chunk ranges differ in length (1, 2 chunks)"),
        ("rank 1 tb 0 op 0", "channel 7 is not declared on rank 1"),
    ]


def test_wrong_buffer_shape_is_reported_and_skips_the_postcondition():
    plan = _good("allgather_3r")
    for gpu in plan["gpus"]:
        gpu["output_chunks"] = 4
    findings = verify(plan)
    assert {f.category for f in findings} == {"bounds"}
    assert findings[0].where == "rank 0"
    assert findings[0].message == (
        "an allgather plan of 3 ranks needs 1 x k input chunks and 3 x k output chunks, got 1 and 4"
    )


def test_a_missing_rank_program_is_a_plan_error():
    plan = _good("allreduce_2r")
    del plan["gpus"][1]
    with pytest.raises(PlanError, match="no program for rank 1"):
        verify(plan)


def test_switch_channels_reduce_over_the_group():
    plan = _good("allreduce_2r_switch")
    assert verify(plan, calls=3) == []
    plan["gpus"][1]["channels"][1]["ranks"] = [1]  # the input-bound group without rank 0
    post = [f for f in verify(plan) if f.category == "postcondition"]
    assert post and "missing r0:input[1]" in post[0].message


def test_unpaired_channel_waits_deadlock():
    plan = _good("allreduce_2r")
    plan["gpus"][1]["channels"][0]["type"] = "port"  # rank 0's memory channel pairs with nothing
    deadlocks = [f for f in verify(plan) if f.category == "deadlock"]
    assert deadlocks[0].where == "rank 0 tb 0 op 2"
    assert "rank 1 declares no memory channel back that pairs with it" in deadlocks[0].message


def test_verify_file_reads_json_and_plan_assembly(tmp_path):
    text = (DATA / "allreduce_2r.txt").read_text()
    assert verify_file(DATA / "allreduce_2r.txt") == []
    (tmp_path / "p.json").write_text(json.dumps(assemble(text)))
    assert verify_file(tmp_path / "p.json") == []
    broken = copy.deepcopy(assemble(text))
    del broken["gpus"][0]["threadblocks"][0]["ops"][0]["src"]
    (tmp_path / "bad.json").write_text(json.dumps(broken))
    with pytest.raises(PlanError):
        verify_file(tmp_path / "bad.json")


RACY = """
from loom.language import *

def build(world_size=2, instances=1):
    n = world_size
    with CollectiveProgram("racy_sendrecv", SendRecv(n, 1, False), n, instances=instances) as program:
        for r in range(n):
            nxt, prv = (r + 1) % n, (r - 1) % n
            to_next, to_prev = MemoryChannel(nxt, r), MemoryChannel(prv, r)
            to_prev.signal(tb=0, relaxed=True)
            to_next.wait(tb=0, relaxed=True)
            to_next.put(Rank(nxt).get_output_buffer()[0:1], Rank(r).get_input_buffer()[0:1], tb=0)
        return program
"""


def test_compile_verifies_unless_told_not_to(tmp_path):
    path = tmp_path / "racy.py"
    path.write_text(RACY)
    with pytest.raises(VerificationError) as caught:
        compile_file(path, world_size=3)
    first = caught.value.findings[0]
    assert (first.category, first.where, first.loc) == ("race", "rank 0 tb 0 op 2", "racy.py:12")
    assert json.loads(compile_file(path, world_size=3, verify=False))["name"] == "racy_sendrecv"


LL_BROADCAST = """
plan ll_broadcast_2r
collective broadcast  protocol ll  inplace false
world_size 2  ranks_per_node 2  threads_per_block 256
message_bytes 0..65536  alignment_bytes 16
root 0

rank 0  chunks input 1 output 1 scratch 0
  channel 0 memory peer 1
  tb 0
    put_packet input[0] -> ch0:scratch[0]
    copy input[0] -> output[0]

rank 1  chunks input 1 output 1 scratch 1
  channel 0 memory peer 0
  tb 0
    unpack_packet scratch[0] -> output[0]
"""


def test_ll_scratch_reuse_needs_a_third_call():
    """Nothing holds the root back: in its third call it writes the half of rank 1's double-
    buffered scratch that rank 1 may still be reading for the first. With two calls run, the inductive
    step's third call finds it all the same."""
    plan = assemble(LL_BROADCAST)
    for calls in (2, 3):
        (finding,) = verify(plan, calls=calls)
        assert (finding.category, finding.where, finding.call) == ("packet", "rank 0 tb 0 op 0", 2)
        assert finding.message.startswith(
            "writes packets at rank 1 scratch[0] (LL half 0) unordered with a read by rank 1 tb 0 op 0"
        )


SHIFTED_SENDRECV = """
from loom.language import *

def build(world_size=4, shift=2):
    n = world_size
    with CollectiveProgram("shifted_sendrecv", SendRecv(n, 1, False), n) as program:
        for r in range(n):
            nxt, prv = (r + shift) % n, (r - shift) % n
            to_next = MemoryChannel(nxt, r)
            to_prev = to_next if prv == nxt else MemoryChannel(prv, r)  # one channel per direction pair
            to_prev.signal(tb=0, relaxed=True, data_sync=SyncType.none)
            to_next.wait(tb=0, relaxed=True, data_sync=SyncType.after)
            to_next.put(Rank(nxt).get_output_buffer()[0:1], Rank(r).get_input_buffer()[0:1], tb=0)
            to_next.signal(tb=0, data_sync=SyncType.before)
            to_prev.wait(tb=0, data_sync=SyncType.after)
        return program
"""


@pytest.mark.parametrize(("world_size", "shift"), [(4, 2), (8, 4), (3, 2), (4, 1)])
def test_sendrecv_takes_any_permutation_the_plan_makes(tmp_path, world_size, shift):
    """As in MSCCL++, a send/recv plan picks its pattern (a ring, pairs, rank + 4): each rank must
    receive exactly one other rank's input."""
    path = tmp_path / "shifted.py"
    path.write_text(SHIFTED_SENDRECV)
    plan = json.loads(compile_file(path, world_size=world_size, shift=shift))
    assert verify(plan) == []


def test_sendrecv_delivering_one_input_twice_is_a_finding():
    plan = _good("sendrecv_3r")
    put = next(op for op in _ops(plan, 2) if op["op"] == "put")
    put["dsts"][0]["channel"] = 1  # rank 2 puts into rank 1's output instead of rank 0's
    messages = [f.message for f in verify(plan) if f.category == "postcondition"]
    assert "rank 0 output[0] holds nothing: no op wrote it; expected {r2:input[0]}" in messages, messages


FAN_OUT_SENDRECV = """
from loom.language import *

def build(world_size=3):
    with CollectiveProgram("fan_out_sendrecv", SendRecv(3, 1, False), 3) as program:
        for src, dst in ((0, 1), (0, 2), (1, 0)):  # ranks 1 and 2 both receive rank 0's input
            out, back = MemoryChannel(dst, src), MemoryChannel(src, dst)
            back.signal(tb=0, relaxed=True, data_sync=SyncType.none)
            out.wait(tb=0, relaxed=True, data_sync=SyncType.after)
            out.put(Rank(dst).get_output_buffer()[0:1], Rank(src).get_input_buffer()[0:1], tb=0)
            out.signal(tb=0, data_sync=SyncType.before)
            back.wait(tb=0, data_sync=SyncType.after)
        return program
"""


def test_sendrecv_delivering_one_rank_input_to_two_ranks_is_a_finding(tmp_path):
    path = tmp_path / "fan_out.py"
    path.write_text(FAN_OUT_SENDRECV)
    plan = json.loads(compile_file(path, verify=False))
    findings = verify(plan)
    assert [(f.category, f.rank, f.message) for f in findings] == [
        (
            "postcondition",
            2,
            "rank 2 and rank 1 both receive rank 0's input: a send/recv delivers each rank's input to exactly one rank",
        )
    ]
