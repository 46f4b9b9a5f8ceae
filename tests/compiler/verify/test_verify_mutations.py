"""The verifier catches what it is for in real library plans: each test breaks a correct plan in
one way and checks the category, the op the finding names and what its message says."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
from loom.assembly import assemble, assemble_file
from loom.compiler.driver import compile_algorithm
from loom.verify import verify

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from plan_mutants import drop_every_flush  # noqa: E402


@functools.cache
def _text(name: str, world_size: int, per_node: int | None, inplace: bool) -> str:
    return compile_algorithm(name, world_size, per_node, inplace=inplace, verify=False)


def _plan(name: str, world_size: int = 4, per_node: int | None = None, inplace: bool = False) -> dict:
    return json.loads(_text(name, world_size, per_node, inplace))


def _ops(plan: dict, rank: int, tb: int = 0) -> list[dict]:
    gpu = next(g for g in plan["gpus"] if g["id"] == rank)
    return next(t for t in gpu["threadblocks"] if t["id"] == tb)["ops"]


def _only(findings, category):
    found = [f for f in findings if f.category == category]
    assert found, "\n".join(map(str, findings)) or "no findings"
    return found


@pytest.mark.parametrize("name", ["allreduce_rs_ag", "allreduce_allpairs_packet", "allgather_ring", "broadcast"])
def test_correct_plans_have_no_findings(name):
    assert verify(_plan(name), calls=3) == []


def test_wrong_source_index_names_the_put_and_the_chunk():
    plan = _plan("allgather_ring", 8, 4)
    ops = _ops(plan, 3)
    last_put = max(i for i, op in enumerate(ops) if op["op"].startswith("put"))
    ops[last_put]["src"]["index"] = (ops[last_put]["src"]["index"] + 1) % 8
    findings = verify(plan)
    assert {f.category for f in findings} == {"postcondition"}
    (finding,) = findings
    assert finding.where == f"rank 3 tb 0 op {last_put}"
    assert finding.message.startswith("rank 4 output[5] holds {r6:input[0]}; expected {r5:input[0]}")
    assert finding.op_text.startswith("put_with_signal_and_flush output[6] -> ch1:output[5]")
    assert finding.loc and finding.loc.startswith("loom/algorithms/allgather_ring.py:")


def test_missing_handshake_races_with_the_previous_call():
    plan = _plan("allgather_fullmesh")
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            tb["ops"] = [op for op in tb["ops"] if not op.get("relaxed")]
    races = _only(verify(plan), "race")
    assert any("the user's read of the result" in f.message for f in races)


def test_contribution_reduced_twice():
    plan = _plan("allreduce_rs_ag")
    for position, op in enumerate(_ops(plan, 0)):
        if "reduce" in op["op"]:
            op["srcs"][2] = dict(op["srcs"][1])
            reduce_at = position
    found = _only(verify(plan), "postcondition")
    assert found[0].where == f"rank 0 tb 0 op {reduce_at}"
    assert "r1:input[0] 2 times; missing r2:input[0]" in found[0].message


def test_wait_without_signal_deadlocks():
    plan = _plan("sendrecv")
    ops = _ops(plan, 1)
    ops.insert(0, {"op": "wait", "channels": [ops[0]["channels"][0]]})
    findings = _only(verify(plan), "deadlock")
    assert findings[1].where == "rank 1 tb 0 op 0"
    assert "the extra waits can never pass" in findings[1].message


def test_packets_never_sent():
    plan = _plan("allreduce_allpairs_packet", 2)
    ops = _ops(plan, 0, 1)
    ops[:] = [op for op in ops if op["op"] != "put_packet"]
    (finding,) = _only(verify(plan), "packet")
    assert finding.where == "rank 1 tb 1 op 1"
    assert "no op writes packets there" in finding.message


def test_packets_to_the_wrong_slot():
    plan = _plan("allreduce_allpairs_packet")
    send = next(op for op in _ops(plan, 0, 0) if op["op"] == "put_packet")
    send["dsts"][0]["index"] += 1
    packet = _only(verify(plan), "packet")
    assert {f.where for f in packet} == {"rank 0 tb 1 op 0", "rank 1 tb 0 op 1"}
    overwrite = "writes packets at rank 1 scratch[1] (LL half 0) over packets of this call that no op has read"
    assert any(f.where == "rank 0 tb 1 op 0" and overwrite in f.message for f in packet)
    never = "polls rank 1 scratch[0] (LL half 0) for packets of call 0, but no op writes packets there"
    assert any(f.where == "rank 1 tb 0 op 1" and never in f.message for f in packet)


def test_plain_read_of_packets():
    plan = _plan("allgather_fullmesh_packet", 2)
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            for op in tb["ops"]:
                if op["op"] == "unpack_packet":
                    op["op"] = "copy"
    packet = _only(verify(plan), "packet")
    assert any(f.where == "rank 1 tb 0 op 0" and "writes packets at rank 0 scratch[0]" in f.message for f in packet)
    assert any(f.where == "rank 1 tb 0 op 2" and "reads rank 1 scratch[0] (LL half 0)" in f.message for f in packet)


def test_inplace_sendrecv_straight_into_the_peer_output_races():
    """In place, sendrecv must go through scratch; writing straight into the peer's buffer races."""
    plan = _plan("sendrecv", 3, inplace=True)
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            tb["ops"] = [op for op in tb["ops"] if op["op"] != "copy"]
            for op in tb["ops"]:
                for dst in op.get("dsts", []):
                    dst["buffer"] = "output"
    races = _only(verify(plan), "race")
    assert any("(= output[0], in place)" in f.message for f in races)


def test_findings_are_sorted_and_deterministic():
    plan = _plan("allreduce_rs_ag")
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            tb["ops"] = [op for op in tb["ops"] if op["op"] != "wait"]
    first = verify(plan)
    assert first == verify(plan)
    assert first == sorted(first, key=lambda f: f.sort_key())
    assert len({f.category for f in first}) >= 2


def test_reading_all_reduce_in_place_without_its_middle_handshake_races_with_the_peers_reads():
    """allreduce_read in place overwrites, in its all-gather, pieces its peers read in its reduce-scatter:
    only the handshake between the two orders them."""
    plan = _plan("allreduce_read", inplace=True)
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            first_get = next(i for i, op in enumerate(tb["ops"]) if op["op"] == "get")
            tb["ops"] = [
                op
                for i, op in enumerate(tb["ops"])
                if i >= first_get or op["op"] not in ("signal", "wait") or op.get("relaxed")
            ]
    races = _only(verify(plan), "race")
    assert any("read_reduce" in f.op_text and "get" in f.message for f in races)


def _reduce_plan(world_size: int, root: int, inplace: bool = False) -> dict:
    return json.loads(compile_algorithm("reduce_read", world_size, root=root, inplace=inplace, verify=False))


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
@pytest.mark.parametrize("inplace", [False, True])
def test_reduce_read_is_proved_for_every_root(world_size, inplace):
    for root in range(world_size):
        assert verify(_reduce_plan(world_size, root, inplace), calls=3) == [], (world_size, root)


def test_reduce_without_the_roots_wait_races_with_the_peers_input():
    plan = _reduce_plan(4, 2)
    ops = _ops(plan, 2)
    ops[:] = [op for op in ops if op["op"] != "wait"]
    races = _only(verify(plan), "race")
    assert any(f.rank == 2 and "read_reduce" in (f.op_text or "") for f in races), "\n".join(map(str, races))


def test_reduce_without_the_peers_final_wait_lets_them_change_the_input_being_read():
    plan = _reduce_plan(3, 0)
    ops = _ops(plan, 1)
    ops[:] = [op for op in ops if op["op"] != "wait"]
    races = _only(verify(plan), "race")
    assert any(f.rank == 0 and "reads rank 1 input[0] unordered with the user's write" in f.message for f in races)


def test_reduce_that_skips_a_peer_is_missing_its_contribution():
    plan = _reduce_plan(4, 1)
    (reduce_op,) = [op for op in _ops(plan, 1) if op["op"] == "read_reduce"]
    dropped = reduce_op["srcs"].pop()
    found = _only(verify(plan), "postcondition")
    assert found[0].rank == 1 and found[0].where == "rank 1 tb 0 op 1"
    assert "missing r" in found[0].message, found[0].message
    assert dropped["channel"] is not None


def test_reduce_must_not_write_a_non_root_output():
    plan = _reduce_plan(2, 0)
    ops = _ops(plan, 1)
    ops.insert(0, {"op": "copy", "src": {"buffer": "input", "index": 0}, "dst": {"buffer": "output", "index": 0}})
    found = _only(verify(plan), "postcondition")
    assert any("a reduce writes the root's output only" in f.message and f.rank == 1 for f in found)


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
@pytest.mark.parametrize("inplace", [False, True])
def test_reduce_packet_is_proved_for_every_root(world_size, inplace):
    for root in range(world_size):
        plan = json.loads(compile_algorithm("reduce_packet", world_size, root=root, inplace=inplace, verify=False))
        assert verify(plan, calls=4) == [], (world_size, root)


def test_reduce_packet_without_the_roots_word_overwrites_unread_packets():
    # A peer that never waits for the root could fill an LL half again before the root read it.
    plan = json.loads(compile_algorithm("reduce_packet", 3, root=0, verify=False))
    ops = _ops(plan, 1)
    ops[:] = [op for op in ops if op["op"] != "wait"]
    found = _only(verify(plan, calls=4), "packet")
    assert any(f.rank == 1 and "the scratch is reused before its packets were read" in f.message for f in found)


# Port channels as the executor runs them (issue 54): the proxy reads a put's source when it gets to the
# trigger, until a flush of the block on that channel. A write to the source before then is a race that the
# verifier names; allreduce_hierarchical's inter-node step (a reduce-and-send over the port channel, then a
# reduce into the same chunks) stays right only with its flush.


def _port_mutants():
    """(what, plan): allreduce_hierarchical for 2 nodes of 2 with its flushes dropped, and with each flush moved
    after the op that follows it."""
    dropped = drop_every_flush(_plan("allreduce_hierarchical", 4, 2))
    moved = _plan("allreduce_hierarchical", 4, 2)
    for gpu in moved["gpus"]:
        for tb in gpu["threadblocks"]:
            ops = tb["ops"]
            for index in range(len(ops) - 1, -1, -1):
                if ops[index]["op"] == "flush":
                    ops.append(ops.pop(index))  # to the end: past the reduce that overwrites what was sent
    return [("dropped flush", dropped), ("flush moved after the write", moved)]


def test_the_hierarchical_all_reduce_is_proven_with_its_flush():
    assert verify(_plan("allreduce_hierarchical", 4, 2), calls=3) == []


@pytest.mark.parametrize(("what", "plan"), _port_mutants(), ids=lambda value: value if isinstance(value, str) else "")
def test_a_port_source_written_before_its_flush_is_a_race_naming_both_ops(what, plan):
    races = _only(verify(plan, calls=3), "race")
    text = str(races[0])
    assert "unordered with the proxy's read of it for rank" in text, text
    assert "which sends it over port channel" in text and "flush the channel first" in text, text
    assert "reduce_send" in text and "allreduce_hierarchical.py:" in text, text  # both ops, the author's line


# The rules issue 54 added beside the port channels': relaxed signals, the threads of one block, and one waiter
# per channel (test_mutation_corpus.py measures them over every library algorithm).


def test_a_relaxed_signal_that_publishes_data_is_a_race():
    # allgather_fullmesh's signal after its put publishes the data; relaxed, it orders only the count.
    plan = _plan("allgather_fullmesh")
    publishing = [op for op in _ops(plan, 0) if op["op"] == "signal" and not op.get("relaxed")]
    publishing[0]["relaxed"] = True
    races = _only(verify(plan, calls=3), "race")
    # The put whose data the signal no longer publishes races with the peer's reads of it.
    assert any(f.op_text.startswith("put input[0] -> ch0:output[0]") for f in races), races
    # The handshake's relaxed signals, as compiled, stay proven.
    assert verify(_plan("allgather_fullmesh"), calls=3) == []


def test_two_ops_of_one_block_touching_the_same_bytes_without_a_sync_race_naming_both():
    plan = _plan("allreduce_allpairs_packet", inplace=True)
    ops = _ops(plan, 0)
    ops[:] = [op for op in ops if op["op"] != "nop"]
    races = [f for f in _only(verify(plan, calls=3), "race") if "same thread block" in f.message]
    assert races, "the dropped nop is found"
    assert "put_packet input[0]" in races[0].message and "put a nop" in races[0].message, races[0]
    assert races[0].loc and "allreduce_allpairs_packet.py:55" in races[0].loc, races[0]


def test_two_thread_blocks_waiting_on_one_channel_are_refused():
    plan = json.loads(compile_algorithm("allgather_fullmesh", 4, instances=2, verify=False))
    blocks = next(g for g in plan["gpus"] if g["id"] == 0)["threadblocks"]
    blocks[0]["ops"].append(dict(next(op for op in blocks[1]["ops"] if op["op"] == "wait")))
    found = [f for f in _only(verify(plan, calls=3), "deadlock") if "waits too" in f.message]
    assert found and "the executor needs every channel's waits in one thread block" in found[0].message, found


def test_two_thread_blocks_acquiring_one_semaphore_are_refused():
    # allreduce_2r_2tb (the verifier's corpus): tb 1 acquires the semaphore tb 0 releases; a second acquirer in
    # tb 0 makes which acquire takes which release depend on timing.
    plan = assemble_file(Path(__file__).with_name("data") / "allreduce_2r_2tb.txt")
    blocks = next(g for g in plan["gpus"] if g["id"] == 0)["threadblocks"]
    acquire = next(op for tb in blocks for op in tb["ops"] if op["op"] == "sem_acquire")
    other = next(tb for tb in blocks if acquire not in tb["ops"])
    other["ops"].append(dict(acquire))
    found = [f for f in _only(verify(plan, calls=3), "deadlock") if "acquires too" in f.message]
    assert found and f"sem{acquire['semaphores'][0]}" in found[0].message, found


def test_a_packet_ops_scratch_operand_is_packets_as_the_executor_takes_it():
    """The executor reads and writes a packet op's own src or dst as packets when it lies in scratch (resolve.cc,
    emitDataPart). Here each rank packs its input into its scratch and sends those packets on; with a plain copy
    in place of the packing, the executor would send the plain bytes as packets and the peer would wait for flags
    that never come: refused, naming the plain data."""
    text = """
plan forward_packed
collective sendrecv  protocol ll  inplace false
world_size 2  ranks_per_node 2  threads_per_block 256
message_bytes 0..65536  alignment_bytes 16
""" + "".join(
        f"""
rank {r}  chunks input 1 output 1 scratch 2
  channel 0 memory peer {1 - r}
  tb 0
    copy_packet input[0] -> scratch[0]
    put_packet scratch[0] -> ch0:scratch[1]
    unpack_packet scratch[1] -> output[0]
"""
        for r in range(2)
    )
    plan = assemble(text, "forward_packed.txt", check=True)
    assert verify(plan) == []
    for gpu in plan["gpus"]:
        for op in gpu["threadblocks"][0]["ops"]:
            if op["op"] == "copy_packet":
                op["op"] = "copy"
    found = [f for f in verify(plan) if f.category == "packet"]
    assert found and all("but it holds plain data written by" in f.message for f in found), found
