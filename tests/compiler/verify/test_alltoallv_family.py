"""The all-to-all-v family (issue 39): plans whose entries are sized by each call's table. The verifier runs
them on symbolic entries (a slot is one entry, whatever its bytes), so a clean run proves every count; a put
into a peer's output must read the receive entry the peer published for the same call. Each mutant breaks
the plan in one way and must be caught, naming the op."""

from __future__ import annotations

import copy
import functools
import json

import pytest
from loom.compiler.driver import compile_algorithm
from loom.errors import InvalidArgumentError
from loom.language import AllToAllV, CollectiveProgram, MemoryChannel, Rank, SyncType
from loom.plan.schema import check_schema
from loom.verify import verify

NAME = "alltoallv_fullmesh"


@functools.cache
def _text(world_size: int, instances: int = 1) -> str:
    return compile_algorithm(NAME, world_size, instances=instances, verify=False)


def _plan(world_size: int = 3, instances: int = 1) -> dict:
    return json.loads(_text(world_size, instances))


def _ops(plan: dict, rank: int = 0, tb: int = 0) -> list[dict]:
    return plan["gpus"][rank]["threadblocks"][tb]["ops"]


def _messages(findings, category: str) -> list[str]:
    found = [f.message for f in findings if f.category == category]
    assert found, "\n".join(map(str, findings)) or "no findings"
    return found


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
@pytest.mark.parametrize("instances", [1, 2])
def test_the_family_is_proven_for_symbolic_counts(world_size, instances):
    plan = _plan(world_size, instances)
    check_schema(plan)
    assert plan["collective"] == "alltoallv" and not plan["inplace"]
    assert verify(plan, calls=3) == []
    # Every peer's thread block publishes first, through every channel it puts through.
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            puts = {d["channel"] for op in tb["ops"] if op["op"] == "put" for d in op["dsts"]}
            published = {c for op in tb["ops"] if op["op"] == "signal" and op.get("publish") for c in op["channels"]}
            assert puts == published


def test_a_put_without_the_peers_entry_is_caught():
    plan = _plan()
    for gpu in plan["gpus"]:  # rank 0 never publishes to rank 1 (its tb 0 serves rank 1)
        if gpu["id"] == 0:
            del _ops(plan, 0, 0)[0]["publish"]
    messages = _messages(verify(plan), "race")
    assert any("rank 0 publishes no entry through the channel" in m and "holds nothing" in m for m in messages)


def test_a_put_not_ordered_after_the_publishing_signal_is_caught():
    plan = _plan()
    del _ops(plan, 0, 0)[1]  # rank 0 puts into rank 1's output without waiting for rank 1's publish
    messages = _messages(verify(plan), "race")
    assert any("mailbox of channel 0" in m and "unordered" in m for m in messages), messages


def test_publishing_after_the_peer_may_already_put_is_caught():
    plan = _plan()
    ops = _ops(plan, 0, 0)
    ops.insert(3, ops.pop(0))  # rank 0 publishes only after its own put
    messages = _messages(verify(plan), "race")
    assert any("reads rank 1's mailbox of channel 0 unordered with the write by rank 0" in m for m in messages)


def test_a_stale_entry_from_the_previous_call_is_caught():
    plan = _plan()
    del _ops(plan, 0, 0)[-1]  # rank 0 ends a call before rank 1's data arrived, and races into the next
    messages = _messages(verify(plan, calls=2), "race")
    assert any("holds its entry of call 0" in m for m in messages), messages


def test_a_put_into_the_wrong_peer_entry_is_caught():
    plan = _plan()
    _ops(plan, 0, 0)[2]["dsts"][0]["index"] = 2
    findings = verify(plan)
    assert any("expected {r2:input[1]}" in m for m in _messages(findings, "postcondition"))


def test_what_the_family_cannot_name_is_a_bounds_finding():
    plan = _plan()
    put = _ops(plan, 0, 0)[2]
    put["op"], put["src"], put["dst"] = "get", {"channel": 0, "buffer": "input", "index": 0}, put["src"]
    del put["dsts"]
    messages = _messages(verify(plan), "bounds")
    assert any("only a peer's output entries are known" in m for m in messages), messages


def test_publish_outside_an_alltoallv_plan_is_a_bounds_finding():
    plan = json.loads(compile_algorithm("alltoall_fullmesh", 2, verify=False))
    _ops(plan)[0]["publish"] = True
    assert any("publish is for alltoallv plans" in m for m in _messages(verify(plan), "bounds"))


def test_the_dsl_refuses_publish_outside_alltoallv_and_in_place_alltoallv():
    from loom.language import AllToAll

    program = CollectiveProgram("p", AllToAll(2, 1, False), 2)
    with program, pytest.raises(Exception, match=r"publish=True\) is for alltoallv"):
        MemoryChannel(1, 0).signal(tb=0, data_sync=SyncType.none, publish=True)
    with pytest.raises(ValueError, match="out of place only"):
        AllToAllV(2, 1, True)
    with pytest.raises(InvalidArgumentError, match="out of place only"):
        compile_algorithm(NAME, 2, inplace=True)
    assert Rank  # the DSL's names the family's algorithm uses


def test_assembly_round_trips_the_publish_flag():
    from loom.assembly import assemble
    from loom.assembly.disasm import disassemble

    plan = _plan(2)
    text = disassemble(plan)
    assert "signal ch0 publish data_sync=none" in text
    assert assemble(text, "alltoallv.txt")["gpus"] == copy.deepcopy(plan)["gpus"]


def _validate(tmp_path, plan: dict):
    from loom.plan.validate import validate_plan_file

    path = tmp_path / "alltoallv.json"
    path.write_text(json.dumps(plan))
    return validate_plan_file(path)


def test_the_decoder_checks_call_sized_plans_and_names_what_breaks_them(tmp_path):
    pytest.importorskip("loom._native", reason="the decoder is native: build it with scripts/setup.sh")
    from loom.errors import PlanError
    from loom.native import native_module

    assert _validate(tmp_path, _plan(4, 2)).collective == "alltoallv"
    cases = []
    plan = _plan()
    plan["gpus"][0]["threadblocks"][0]["ops"][2]["dsts"][0]["buffer"] = "input"
    cases.append((plan, r"dsts\[0\]: an \"alltoallv\" plan reaches a peer only by writing into its output"))
    plan = _plan()
    plan["inplace"] = True
    cases.append((plan, r"inplace: an \"alltoallv\" plan runs out of place only"))
    plan = _plan()
    plan["gpus"][0]["scratch_chunks"] = 1
    plan["gpus"][0]["threadblocks"][-1]["ops"][0]["dst"] = {"buffer": "scratch", "index": 0}
    cases.append((plan, r"dst.buffer: an \"alltoallv\" plan has no scratch chunks"))
    plan = json.loads(compile_algorithm("alltoall_fullmesh", 2, verify=False))
    plan["gpus"][0]["threadblocks"][0]["ops"][0]["publish"] = True
    cases.append((plan, r"ops\[0\].publish: publish is for \"alltoallv\" plans"))
    plan = _plan()
    plan["gpus"][0]["threadblocks"][0]["ops"][1]["publish"] = True  # a wait
    cases.append((plan, r"ops\[1\].publish: unknown field"))
    for broken, message in cases:
        with pytest.raises(PlanError, match=message):
            _validate(tmp_path, broken)
    # The native decoder on its own (what libloom_nccl.so and the registry read) says the same of the wait.
    broken = _plan()
    broken["gpus"][0]["threadblocks"][0]["ops"][1]["publish"] = True
    with pytest.raises(PlanError, match=r"ops\[1\].publish: not a field of a \"wait\" op"):
        native_module().Plan.parse(json.dumps(broken), "alltoallv.json")


def test_the_executor_refuses_to_run_a_call_sized_plan_with_the_reason(tmp_path):
    native = pytest.importorskip("loom._native", reason="the executor is native: build it with scripts/setup.sh")
    import numpy as np
    from loom.runtime.executor import Executor
    from loom.runtime.host_ranks import run_ranks

    plan = _validate(tmp_path, _plan(2))

    def rank(bootstrap):
        executor = Executor(native.Communicator(bootstrap, host_only=True))
        data = np.zeros(64, np.float32)
        executor.execute(plan, data, data.copy())

    results = run_ranks(2, None, rank)
    for error in results.values():
        assert isinstance(error, Exception) and "is an alltoallv plan, whose sizes come with each call" in str(error)


@pytest.mark.parametrize(("world_size", "ranks_per_node"), [(2, 1), (4, 2), (8, 4)])
def test_the_family_across_nodes_is_proven_and_flushes_its_port_lanes(world_size, ranks_per_node):
    """Peers on other nodes are reached over port channels; each such lane's put, signal and flush fuse into one
    op before its last wait (without the flush the proxy may still read the input when the call ends)."""
    plan = json.loads(compile_algorithm(NAME, world_size, ranks_per_node, verify=False))
    check_schema(plan)
    assert verify(plan, calls=3) == []
    for gpu in plan["gpus"]:
        ports = {c["id"] for c in gpu["channels"] if c["type"] == "port"}
        assert len(ports) == world_size - ranks_per_node
        for tb in gpu["threadblocks"]:
            names = [op["op"] for op in tb["ops"]]
            if any(c in ports for op in tb["ops"] for c in op.get("channels", [])):
                assert names[-2:] == ["put_with_signal_and_flush", "wait"], names  # put, signal, flush fused


def test_a_put_across_nodes_without_the_peers_entry_is_caught():
    plan = json.loads(compile_algorithm(NAME, 2, 1, verify=False))
    del _ops(plan, 0, 0)[0]["publish"]
    assert verify(plan, calls=2), "a put through a port channel must read the entry the peer published"


# The eager packet family (alltoallv_packet): every entry goes as LL packets into a region of the receiver's
# scratch and is unpacked from there; no mailbox, no signal, no wait. Rank 0 of 3 sends to rank 1 on tb 0
# (into rank 1's scratch[0]) and unpacks rank 1's packets from its own scratch[0] into output[1]; tb 1 does the
# same with rank 2 (scratch[1], output[2]).
PACKET = "alltoallv_packet"


@functools.cache
def _packet_text(world_size: int) -> str:
    return compile_algorithm(PACKET, world_size, verify=False)


def _packet_plan(world_size: int = 3) -> dict:
    return json.loads(_packet_text(world_size))


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
def test_the_packet_family_is_proven_for_symbolic_counts(world_size):
    """Three calls: the third reuses the LL half of the first, which is safe only if every rank's call ends after
    its peers have read what it wrote there (both directions of every pair run in every call)."""
    plan = _packet_plan(world_size)
    check_schema(plan)
    assert (plan["collective"], plan["protocol"], plan["inplace"]) == ("alltoallv", "ll", False)
    assert verify(plan, calls=3) == []


def test_an_unpack_from_the_wrong_region_is_caught():
    plan = _packet_plan()
    _ops(plan, 0, 0)[1]["src"]["index"] = 1  # rank 2's packets into the entry from rank 1
    findings = verify(plan)
    assert any(
        "rank 0 output[1] holds {r2:input[0]}; expected {r1:input[0]}" in m
        for m in _messages(findings, "postcondition")
    )
    # Rank 1's packets are never read, so rank 1 may fill that half again while rank 0 is still in the call.
    assert any("scratch is reused before its packets were read" in m for m in _messages(findings, "packet"))


def test_a_put_into_the_wrong_peers_region_is_caught():
    plan = _packet_plan()
    _ops(plan, 0, 0)[0]["dsts"][0]["index"] = 1  # into rank 1's region for rank 2's packets
    findings = verify(plan)
    packets = _messages(findings, "packet")
    assert any(
        "polls rank 1 scratch[0] (LL half 0) for packets of call 0, but no op writes packets there" in m
        for m in packets
    )
    assert any("writes packets at rank 1 scratch[1]" in m and "rank 2 tb 1 op 0" in m for m in packets), packets


def test_a_missing_put_is_caught():
    plan = _packet_plan()
    del _ops(plan, 0, 0)[0]  # rank 0 sends rank 1 nothing: rank 1 polls its region for ever
    findings = verify(plan)
    assert any("polls rank 1 scratch[0] (LL half 0) for packets of call 0" in m for m in _messages(findings, "packet"))
    assert _messages(findings, "deadlock")


def test_a_missing_unpack_is_caught():
    plan = _packet_plan()
    del _ops(plan, 0, 0)[1]
    findings = verify(plan)
    assert any("rank 0 output[1] holds nothing" in m for m in _messages(findings, "postcondition"))
    # Without the unpack rank 0 no longer waits for rank 1, so it can write a half rank 1 has not finished reading.
    assert any(
        "writes packets at rank 1 scratch[0] (LL half 0) unordered with a read by rank 1" in m
        for m in _messages(findings, "packet")
    )


def test_an_unpack_into_the_wrong_entry_is_caught():
    plan = _packet_plan()
    _ops(plan, 0, 0)[1]["dst"]["index"] = 2
    findings = verify(plan)
    postconditions = _messages(findings, "postcondition")
    assert any("rank 0 output[1] holds nothing" in m for m in postconditions)
    assert any("rank 0 output[2] holds {r1:input[0]}; expected {r2:input[0]}" in m for m in postconditions)
    assert any("writes rank 0 output[2] unordered" in m for m in _messages(findings, "race"))


def test_a_put_of_the_wrong_send_entry_is_caught():
    plan = _packet_plan()
    _ops(plan, 0, 0)[0]["src"]["index"] = 2  # rank 0's entry for rank 2 sent to rank 1
    findings = verify(plan)
    assert any(
        "rank 1 output[0] holds {r0:input[2]}; expected {r0:input[1]}" in m
        for m in _messages(findings, "postcondition")
    )


def test_a_one_way_pair_reuses_the_half_too_early():
    """The LL halves are safe because both directions of a pair run in every call. A pair in which rank 1 sends
    rank 0 nothing (and rank 0 unpacks nothing from it) lets rank 0 run two calls ahead into the half rank 1
    may still be reading."""
    plan = _packet_plan(2)
    del _ops(plan, 1, 0)[0]
    del _ops(plan, 0, 0)[1]
    findings = verify(plan)
    assert any(
        "writes packets at rank 1 scratch[0] (LL half 0)" in m and "before its packets were read" in m
        for m in _messages(findings, "packet")
    )


def test_a_plain_copy_out_of_a_packet_region_is_caught():
    plan = _packet_plan()
    _ops(plan, 0, 0)[1]["op"] = "copy"
    messages = _messages(verify(plan), "bounds")
    assert any("an ll alltoallv plan has scratch for packet regions only" in m for m in messages), messages


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda ops: ops[0].update(op="read_put_packet"), "read_put_packet is not an op of an alltoallv plan"),
        (lambda ops: ops[0].update(op="put"), "an ll alltoallv plan has scratch for packet regions only"),
        (
            lambda ops: ops[0]["src"].update(buffer="output"),
            "put_packet moves one whole send entry as packets (their count packet says how many bytes), so its src"
            " must be a whole slot of this rank's input (1 chunk(s) from a multiple of 1), not output[1]",
        ),
        (
            lambda ops: ops[1]["dst"].update(buffer="input"),
            "unpack_packet moves one whole receive entry as packets",
        ),
        (
            lambda ops: ops[0]["dsts"][0].update(buffer="output"),
            "put_packet into a packet region: its dsts must be one chunk of the receiving peer's scratch, through a"
            " channel, not ch0:output[0]",
        ),
        (
            lambda ops: ops[1]["src"].update(channel=0),
            "unpack_packet out of a packet region: its src must be one chunk of this rank's own scratch",
        ),
    ],
)
def test_what_the_packet_family_cannot_name_is_a_bounds_finding(mutate, message):
    plan = _packet_plan()
    mutate(_ops(plan, 0, 0))
    messages = _messages(verify(plan), "bounds")
    assert any(message in m for m in messages), messages


def test_a_packet_region_holds_one_whole_entry():
    """With two chunks per entry a packet op would move half an entry, but the count packet describes a whole
    one: the verifier refuses it, whatever else the plan gets right."""
    plan = _packet_plan(2)
    for gpu in plan["gpus"]:
        gpu["input_chunks"] = gpu["output_chunks"] = 4
        gpu["scratch_chunks"] = 2
    _ops(plan, 0, 0)[0]["src"]["index"] = 2  # chunk 0 of the entry to rank 1 (input slot 1 is chunks 2 and 3)
    messages = _messages(verify(plan), "bounds")
    assert any(
        "its src must be a whole slot of this rank's input (2 chunk(s) from a multiple of 2)" in m for m in messages
    )


def test_scratch_stays_refused_in_simple_alltoallv_plans():
    plan = _packet_plan()
    plan["protocol"] = "simple"
    messages = _messages(verify(plan), "bounds")
    assert set(messages) == {"an alltoallv plan has no scratch: its entries are sized per call"}


def test_a_packet_region_through_a_port_channel_is_refused_by_verifier_and_decoder():
    """The executor writes a region's packets straight into the peer's scratch: a port channel's proxy would carry
    them after the flags said they were there. Both the verifier and the C++ decoder refuse it."""
    plan = _packet_plan(2)
    for gpu in plan["gpus"]:
        for channel in gpu["channels"]:
            channel["type"] = "port"
    messages = _messages(verify(plan), "bounds")
    assert any("reaches a peer's region through a memory channel only" in m for m in messages), messages
    native = pytest.importorskip("loom._native", reason="the native module is not built")
    with pytest.raises(
        Exception, match=r"threadblocks\[0\]\.ops\[0\]\.dsts\[0\]\.channel: channel 0 is a port channel"
    ):
        native.Plan.parse(json.dumps(plan))
