"""loom.Communicator end to end on the CPU backend (ranks on host threads): each collective selects a
registered plan per call and matches a numpy reference; custom selectors, the fallback and the no-plan
error; the registry's Python API."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from loom.compiler.driver import compile_algorithm

_native = pytest.importorskip("loom._native", reason="the native module is not built")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import loom  # noqa: E402
from loom.errors import InvalidArgumentError  # noqa: E402
from rank_threads import run_local_ranks  # noqa: E402

WORLD = 4

# (plan name, algorithm, world size, in place, options)
PLANS = [
    ("t_allreduce_inplace", "allreduce_allpairs_packet", WORLD, True, {}),
    ("t_allreduce", "allreduce_allpairs_packet", WORLD, False, {}),
    ("t_allgather", "allgather_fullmesh", WORLD, False, {}),
    ("t_allgather_inplace", "allgather_fullmesh", WORLD, True, {}),
    ("t_reducescatter", "reducescatter_fullmesh", WORLD, False, {}),
    ("t_alltoall", "alltoall_fullmesh", WORLD, False, {}),
    ("t_broadcast_root1", "broadcast", WORLD, True, {"root": 1}),
    ("t_pair", "alltoallv_fullmesh", 2, False, {}),  # send/recv: counted calls of the pair's plan
]


@pytest.fixture
def registered(tmp_path, monkeypatch):
    """The test plans as user plans, and no bundled plans in the way."""
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LOOM_DEFAULT_PLANS", "0")
    loom.registry.load_default_plans()
    for name, algorithm, world, inplace, options in PLANS:
        text = compile_algorithm(
            algorithm,
            world,
            inplace=inplace,
            plan_name=name,
            verify=False,
            min_message_size=0,
            max_message_size=1 << 22,
            **options,
        )
        loom.register_plan(_native.Plan.parse(text))
    yield
    for name, *_ in PLANS:
        loom.unregister_plan(name)
    loom.set_selector(None)
    loom.set_fallback(None)


def _run(world: int, body):
    return run_local_ranks(world, body)


def _data(rank: int, count: int) -> np.ndarray:
    return np.random.default_rng(100 + rank).standard_normal(count).astype(np.float32)


def test_every_collective_selects_and_matches_numpy(registered):
    count = 1000 * WORLD  # 16,000 bytes: the pieces of reduce-scatter and all-to-all end mid-vector
    inputs = [_data(r, count) for r in range(WORLD)]

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        rank = comm.rank
        mine = inputs[rank]
        piece = count // WORLD

        tensor = mine.copy()
        comm.all_reduce(tensor)
        np.testing.assert_allclose(tensor, sum(x.astype(np.float64) for x in inputs), rtol=1e-5, atol=1e-5)
        reduced = np.zeros(count, np.float32)
        comm.all_reduce(mine, output=reduced)  # out of place: mine stays as it was
        np.testing.assert_array_equal(reduced, tensor)
        np.testing.assert_array_equal(mine, inputs[rank])

        gathered = np.zeros(count * WORLD, np.float32)
        comm.all_gather(gathered, mine)
        np.testing.assert_array_equal(gathered, np.concatenate(inputs))
        gathered_inplace = np.zeros(count * WORLD, np.float32)
        gathered_inplace[rank * count : (rank + 1) * count] = mine
        comm.all_gather(gathered_inplace, gathered_inplace[rank * count : (rank + 1) * count])
        np.testing.assert_array_equal(gathered_inplace, np.concatenate(inputs))

        scattered = np.zeros(piece, np.float32)
        comm.reduce_scatter(scattered, mine)
        expected = sum(x.astype(np.float64) for x in inputs)[rank * piece : (rank + 1) * piece]
        np.testing.assert_allclose(scattered, expected, rtol=1e-5, atol=1e-5)

        exchanged = np.zeros(count, np.float32)
        comm.all_to_all(exchanged, mine)
        np.testing.assert_array_equal(exchanged, np.concatenate([x[rank * piece : (rank + 1) * piece] for x in inputs]))

        broadcast = mine.copy()
        comm.broadcast(broadcast, root=1)
        np.testing.assert_array_equal(broadcast, inputs[1])
        return comm.executor.stats()["launches"]

    assert all(launches == 7 for launches in _run(WORLD, body).values())


def test_send_and_recv_between_two_ranks(registered):
    payload = _data(7, 4096)

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        if comm.rank == 0:
            comm.send(payload, peer=1)
            return None
        received = np.zeros_like(payload)
        comm.recv(received, peer=0)
        return received

    np.testing.assert_array_equal(_run(2, body)[1], payload)


def test_small_sends_take_the_packet_plan_under_loom_p2p_packet_bytes(registered, monkeypatch):
    """LOOM_P2P_PACKET_BYTES: a message of at most that many bytes between two ranks of one node runs the eager
    packet plan (alltoallv_packet), a larger one the registered pair plan; both arrive whole."""
    from loom.runtime import communicator as communicator_module

    monkeypatch.setenv("LOOM_P2P_PACKET_BYTES", "4096")
    small, large = _data(8, 1000), _data(9, 5000)  # 4000 bytes, then 20000 bytes
    before = communicator_module._packet_plan.cache_info()

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        if comm.rank == 0:
            for payload in (small, large, small):
                comm.send(payload, peer=1)
            return None
        received = [np.zeros_like(small), np.zeros_like(large), np.zeros_like(small)]
        for inbox in received:
            comm.recv(inbox, peer=0)
        return received

    got = _run(2, body)[1]
    for inbox, payload in zip(got, (small, large, small), strict=True):
        np.testing.assert_array_equal(inbox, payload)
    after = communicator_module._packet_plan.cache_info()
    assert after.hits + after.misses - before.hits - before.misses == 4, "two small messages, on both ranks"


def test_a_malformed_loom_p2p_packet_bytes_names_the_variable(registered, monkeypatch):
    monkeypatch.setenv("LOOM_P2P_PACKET_BYTES", "lots")

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        with pytest.raises(InvalidArgumentError, match=r"LOOM_P2P_PACKET_BYTES='lots': expected a byte count"):
            comm.send(_data(1, 10), peer=1 - comm.rank)
        return True

    _run(2, body)


def test_send_and_recv_in_a_larger_job_involve_only_the_two_ranks(registered):
    payloads = [_data(20 + rank, 1000) for rank in range(WORLD)]

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        rank = comm.rank
        received = {}
        # A ring, twice: even ranks send first, odd ranks receive first, so every pair meets.
        for _ in range(2):
            after, before = (rank + 1) % WORLD, (rank - 1) % WORLD
            inbox = np.zeros(1000, np.float32)
            if rank % 2 == 0:
                comm.send(payloads[rank], peer=after)
                comm.recv(inbox, peer=before)
            else:
                comm.recv(inbox, peer=before)
                comm.send(payloads[rank], peer=after)
            received["ring"] = inbox
        # Ranks 0 and 3 exchange while ranks 1 and 2 make no call at all.
        if rank in (0, 3):
            inbox = np.zeros(1000, np.float32)
            if rank == 0:
                comm.send(payloads[0], peer=3)
            else:
                comm.recv(inbox, peer=0)
            received["pair"] = inbox
        with pytest.raises(InvalidArgumentError, match="peer: expected a rank from 0 to 3, got 4"):
            comm.send(payloads[rank], peer=4)
        mine = np.zeros(1000, np.float32)
        comm.send(payloads[rank], peer=rank)  # to itself, as in an NCCL group: its recv copies
        comm.recv(mine, peer=rank)
        received["self"] = mine
        return received

    results = _run(WORLD, body)
    for rank in range(WORLD):
        np.testing.assert_array_equal(results[rank]["ring"], payloads[(rank - 1) % WORLD])
    np.testing.assert_array_equal(results[3]["pair"], payloads[0])
    for rank in range(WORLD):
        np.testing.assert_array_equal(results[rank]["self"], payloads[rank])


def test_custom_selector_runs_once_per_request_and_the_fallback_takes_what_nothing_fits(registered):
    seen = []

    def selector(request):
        seen.append((request.collective, request.message_bytes, request.dtype, request.inplace, request.capturing))
        return request.candidates[0] if request.candidates else None

    loom.set_selector(selector)
    fallback_calls = []

    def fallback(request, output, input):
        fallback_calls.append((request.collective, request.message_bytes, request.world_size))
        output[...] = input * WORLD  # what an all-reduce of equal inputs gives

    loom.set_fallback(fallback)

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        for _ in range(3):
            tensor = np.ones(256, np.float32)
            comm.all_reduce(tensor)
            assert np.all(tensor == WORLD)
        huge = np.ones((1 << 22) // 4 + 4, np.float32)  # above every registered plan's range
        comm.all_reduce(huge)
        assert np.all(huge == WORLD)

    _run(WORLD, body)
    # Four ranks, two request keys: the selector ran once per key (all ranks share the process).
    assert sorted(set(seen)) == [
        ("allreduce", 1024, "float32", True, False),
        ("allreduce", (1 << 22) + 16, "float32", True, False),
    ]
    assert len(seen) == 2
    assert fallback_calls == [("allreduce", (1 << 22) + 16, WORLD)] * WORLD


def test_no_plan_is_an_error_that_lists_what_is_registered(registered):
    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        with pytest.raises(InvalidArgumentError) as error:
            comm.all_reduce(np.ones((1 << 22) // 4 + 4, np.int32))  # above every plan's range
        return str(error.value)

    message = _run(WORLD, body)[0]
    assert "no plan for allreduce of 4194320 bytes (int32, sum, in place) over 4 ranks, 4 per node" in message
    assert "t_allreduce_inplace (user): 4 per node, bytes 0..4194304, in place, sum" in message


def test_a_plan_is_selected_only_for_the_operator_it_reduces_with(registered):
    """A max all-reduce finds no sum plan (it found one and failed in the executor before); with a max
    plan registered it runs on that one, and sum calls keep theirs."""
    sum_text = compile_algorithm(
        "allreduce_allpairs_packet",
        WORLD,
        inplace=True,
        plan_name="t_allreduce_max",
        verify=False,
        min_message_size=0,
        max_message_size=1 << 16,
    )
    max_plan = _native.Plan.parse(sum_text.replace('"reduce_op": "sum"', '"reduce_op": "max"'))
    inputs = [np.random.default_rng(rank).standard_normal(1024).astype(np.float32) for rank in range(WORLD)]

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        data = inputs[comm.rank].copy()
        no_max_plan = r"no plan for allreduce of 4096 bytes \(float32, max, in place\)"
        with pytest.raises(InvalidArgumentError, match=no_max_plan):
            comm.all_reduce(data, "max")
        bootstrap.barrier()
        if comm.rank == 0:
            loom.register_plan(max_plan)
        bootstrap.barrier()
        comm.all_reduce(data, "max")
        return data

    try:
        for result in _run(WORLD, body).values():
            np.testing.assert_array_equal(result, np.max(inputs, axis=0))
        assert loom.registry.select("allreduce", 4096, "float32", WORLD, WORLD, inplace=True, op="max").name == (
            "t_allreduce_max"
        )
        assert loom.registry.select("allreduce", 4096, "float32", WORLD, WORLD, inplace=True).name == (
            "t_allreduce_inplace"
        )
        assert loom.list_plans(collective="allreduce", source="user")[0].reduce_op in ("sum", "max")
    finally:
        loom.unregister_plan("t_allreduce_max")


def test_registry_python_api(registered):
    entries = loom.list_plans(collective="allgather", world_size=WORLD)
    assert [e.name for e in entries] == ["t_allgather", "t_allgather_inplace"]
    assert entries[0].source == "user" and not entries[0].inplace and entries[1].inplace
    plan = loom.registry.select("allgather", 4096, "float32", WORLD, WORLD, inplace=True)
    assert plan.name == "t_allgather_inplace"
    with pytest.raises(InvalidArgumentError, match="'t_allgather' is registered already"):
        loom.register_plan(entries[0].plan)
    text = compile_algorithm(
        "allgather_fullmesh", WORLD, plan_name="t_allgather_bf16", verify=False, min_message_size=0
    )
    entry = loom.register_plan(
        _native.Plan.parse(text), data_types=["bfloat16"], tags=["fast"], min_message_bytes=0, max_message_bytes=8192
    )
    try:
        assert entry.data_types == ["bfloat16"] and entry.tags == ["fast"]
        assert loom.registry.select("allgather", 4096, "bfloat16", WORLD, WORLD).name == "t_allgather_bf16"
        assert loom.registry.select("allgather", 4096, "float32", WORLD, WORLD).name == "t_allgather"
        assert loom.registry.select("allgather", 4096, "float32", WORLD, WORLD, tags=["fast"]) is None
    finally:
        assert loom.unregister_plan("t_allgather_bf16")
    with pytest.raises(InvalidArgumentError, match="selector: expected a callable"):
        loom.set_selector(42)
    with pytest.raises(InvalidArgumentError, match="plan: expected a loom.Plan, a plan file path or what loom.compile"):
        loom.register_plan(3.5)
