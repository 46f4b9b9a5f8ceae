"""The symbolic simulator catches what it is for: wrong indices, missing syncs, missing handshakes,
double reductions, deadlocks, packets read as plain data. Each test breaks a correct library plan."""

from __future__ import annotations

import copy

import pytest
from library_cases import plan_dict
from plan_simulator import SimulationError, simulate


def _plan(name: str, world_size: int = 4, per_node: int | None = None, inplace: bool = False) -> dict:
    return copy.deepcopy(plan_dict(name, world_size, per_node, 1, inplace))


def _ops(plan: dict, rank: int, tb: int = 0) -> list[dict]:
    gpu = next(g for g in plan["gpus"] if g["id"] == rank)
    return next(t for t in gpu["threadblocks"] if t["id"] == tb)["ops"]


def _drop_handshakes(plan: dict) -> None:
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            tb["ops"] = [op for op in tb["ops"] if not op.get("relaxed")]


def test_correct_plans_pass():
    for name in ("allreduce_rs_ag", "allreduce_allpairs_packet", "allgather_ring"):
        simulate(_plan(name))


def test_wrong_source_index():
    plan = _plan("allgather_ring", 8, 4)
    ops = _ops(plan, 3)
    last_put = max(i for i, op in enumerate(ops) if op["op"].startswith("put"))
    ops[last_put]["src"]["index"] = (ops[last_put]["src"]["index"] + 1) % 8
    with pytest.raises(SimulationError, match="rank 4 output chunk"):
        simulate(plan)


def test_missing_handshake_races_with_the_previous_call():
    plan = _plan("allgather_fullmesh")
    _drop_handshakes(plan)
    with pytest.raises(SimulationError, match="race"):
        simulate(plan)


def test_missing_data_sync_reads_before_the_data_arrives():
    plan = _plan("reducescatter_fullmesh")
    for gpu in plan["gpus"]:
        tb = gpu["threadblocks"][0]
        tb["ops"] = [op for op in tb["ops"] if op["op"] not in ("signal", "wait") or op.get("relaxed")]
        for op in tb["ops"]:  # fused puts-with-signal become plain puts
            if op["op"].startswith("put_with_signal"):
                op["op"] = "put"
    with pytest.raises(SimulationError, match="nothing wrote|race"):
        simulate(plan)


def test_contribution_reduced_twice():
    plan = _plan("allreduce_rs_ag")
    for op in _ops(plan, 0):
        if "reduce" in op["op"]:
            op["srcs"][2] = dict(op["srcs"][1])
    with pytest.raises(SimulationError, match="reduced twice"):
        simulate(plan)


def test_wait_without_signal_deadlocks():
    plan = _plan("sendrecv")
    ops = _ops(plan, 1)
    ops.insert(0, {"op": "wait", "channels": [ops[0]["channels"][0]]})
    _ops(plan, 2).insert(0, {"op": "signal", "channels": [_ops(plan, 2)[0]["channels"][0]]})
    with pytest.raises(SimulationError, match="deadlock|signals nobody waits for"):
        simulate(plan)


def test_packets_never_sent_deadlock():
    plan = _plan("allreduce_allpairs_packet", 2)
    ops = _ops(plan, 0, 1)
    ops[:] = [op for op in ops if op["op"] != "put_packet"]
    with pytest.raises(SimulationError, match="deadlock"):
        simulate(plan)


def test_packets_to_the_wrong_slot_race():
    plan = _plan("allreduce_allpairs_packet")
    ops = _ops(plan, 0, 0)
    send = next(op for op in ops if op["op"] == "put_packet")
    send["dsts"][0]["index"] += 1
    with pytest.raises(SimulationError):
        simulate(plan)


def test_plain_read_of_packets():
    plan = _plan("allgather_fullmesh_packet", 2)
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            for op in tb["ops"]:
                if op["op"] == "unpack_packet":
                    op["op"] = "copy"
    # A plain copy does not poll: it reads before the packets arrive, or reads them as plain data.
    with pytest.raises(SimulationError, match="which nothing wrote|as plain data, but it holds packets"):
        simulate(plan)


def test_stale_data_from_the_previous_call():
    """In place, sendrecv must go through scratch; writing straight into the peer's buffer races."""
    plan = _plan("sendrecv", 3, inplace=True)
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            tb["ops"] = [op for op in tb["ops"] if op["op"] != "copy"]
            for op in tb["ops"]:
                for dst in op.get("dsts", []):
                    dst["buffer"] = "output"
    with pytest.raises(SimulationError, match="race|holds"):
        simulate(plan)
