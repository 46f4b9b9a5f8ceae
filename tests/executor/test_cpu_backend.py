"""Every library plan on the CPU backend (ranks and thread blocks on host threads, host memory), against
a numpy reference: world sizes 2, 4 and 8 on one node, 2 nodes x 2, 3 nodes x 1 and 3 nodes x 2 (port
channels over TCP), in place and out of place, message sizes that do not divide evenly, several calls in a row (LL flags
and scratch halves alternate)."""

from __future__ import annotations

import functools
import json
import os
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from loom.algorithms import ALGORITHMS
from loom.compiler.driver import compile_algorithm

_native = pytest.importorskip("loom._native", reason="the native module is not built")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import loom  # noqa: E402
from alltoallv_cases import COLUMNS, expected_output, random_counts, rank_input  # noqa: E402
from plan_buffers import plan_buffers  # noqa: E402
from rank_threads import run_ranks  # noqa: E402

SHAPES = ((2, None), (4, None), (8, None), (4, 2), (3, 1), (6, 2))  # and 3 nodes x 1 GPU, 3 nodes x 2
DTYPES = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "uint32": np.uint32}
CALLS = 3


def _cases():
    out = []
    for name, algorithm in sorted(ALGORITHMS.items()):
        for world, per_node in SHAPES:
            if per_node is None and world not in algorithm.world_sizes:
                continue
            if per_node is not None and [world // per_node, per_node] not in [list(s) for s in algorithm.multi_node]:
                continue
            for inplace in (False, True):
                out.append((name, world, per_node, inplace))
    return out


def _case_id(case) -> str:
    name, world, per_node, inplace = case
    shape = f"{world}r" if per_node is None else f"{world // per_node}x{per_node}"
    return f"{name}-{shape}" + ("-inplace" if inplace else "")


@functools.cache
def _plan(name: str, world: int, per_node: int | None, inplace: bool):
    options = {"root": world - 1} if name == "broadcast" else {}
    text = compile_algorithm(
        name, world, per_node, inplace=inplace, verify=False, min_message_size=0, max_message_size=1 << 24, **options
    )
    return _native.Plan.parse(text)


def _inputs(seed: int, world: int, nbytes: int, dtype) -> list[np.ndarray]:
    count = nbytes // np.dtype(dtype).itemsize
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        low = 0 if dtype == np.uint32 else -1000
        return [rng.integers(low, 1000, count).astype(dtype) for _ in range(world)]
    return [rng.standard_normal(count).astype(dtype) for _ in range(world)]


def _expected(plan, rank: int, inputs: list[np.ndarray]) -> np.ndarray:
    world = len(inputs)
    wide = [x.astype(np.float64) for x in inputs]
    if plan.collective == "allreduce":
        return sum(wide)
    if plan.collective == "reducescatter":
        piece = wide[0].size // world
        return sum(wide)[rank * piece : (rank + 1) * piece]
    if plan.collective == "allgather":
        return np.concatenate(wide)
    if plan.collective == "alltoall":
        piece = wide[0].size // world
        return np.concatenate([w[rank * piece : (rank + 1) * piece] for w in wide])
    if plan.collective == "broadcast":
        return wide[plan.root]
    if plan.collective == "reduce":
        # Only the root's output gets the sum; another rank's stays as plan_buffers made it (its input in
        # place, zeros out of place): a plan that wrote it would fail here.
        if rank == plan.root:
            return sum(wide)
        return wide[rank] if plan.inplace else np.zeros_like(wide[rank])
    return wide[(rank - 1) % world]  # sendrecv


def _sizes(plan, dtype) -> list[int]:
    unit = np.dtype(dtype).itemsize * (plan.world_size if plan.collective in ("reducescatter", "alltoall") else 1)
    # Odd sizes: chunks and pipeline slices end mid-vector, the last LL packet is partial.
    return [unit * 3, unit * 1001, unit * 8197]


@pytest.mark.parametrize("case", _cases(), ids=_case_id)
def test_library_plan_on_cpu_backend(case):
    name, world, per_node, inplace = case
    plan = _plan(name, world, per_node, inplace)
    dtype_name = list(DTYPES)[zlib.crc32(_case_id(case).encode()) % len(DTYPES)]
    _run_and_check(plan, dtype_name, _sizes(plan, DTYPES[dtype_name]))


@pytest.mark.parametrize("inplace", [False, True], ids=["out_of_place", "inplace"])
def test_alltoall_port_with_every_peer_at_once_on_cpu_backend(inplace):
    """alltoall_port's mesh form (all peers in one step; the library plans take one per step)."""
    text = compile_algorithm("alltoall_port", 4, inplace=inplace, peers_per_step=3, verify=False, min_message_size=0)
    plan = _native.Plan.parse(text)
    _run_and_check(plan, "float32", _sizes(plan, np.float32))


LARGEST_CPU_MESSAGE = 1 << 20
BUNDLED = sorted((Path(__file__).resolve().parents[2] / "plans" / "default").glob("*.json"))


def _sizes_in_range(plan, dtype) -> list[int]:
    """The smallest and the largest odd multiple of the plan's unit inside its size range (the largest
    at most 1 MiB, so that the host threads stay quick)."""
    unit = np.dtype(dtype).itemsize * (plan.world_size if plan.collective in ("reducescatter", "alltoall") else 1)
    low = max(plan.min_message_bytes, unit) // unit
    low += (low % 2 == 0) if low * unit >= plan.min_message_bytes else 1
    high = min(plan.max_message_bytes, LARGEST_CPU_MESSAGE) // unit
    high -= high % 2 == 0
    return sorted({low * unit, high * unit})


@pytest.mark.parametrize("path", BUNDLED, ids=lambda path: path.stem)
def test_bundled_plan_on_cpu_backend(path):
    """Every plan the package ships runs on the CPU backend at both ends of its size range. A range
    that starts above 1 MiB is opened down to 0 first (the program is the same at every size), so
    that host memory and time stay small."""
    plan = _native.Plan.load(str(path))
    if plan.collective == "alltoallv":
        _run_counted_and_check(plan)
        return
    if plan.min_message_bytes > LARGEST_CPU_MESSAGE:
        opened = json.loads(path.read_text())
        opened["min_message_bytes"] = 0
        plan = _native.Plan.parse(json.dumps(opened))
    dtype_name = list(DTYPES)[zlib.crc32(path.name.encode()) % len(DTYPES)]
    sizes = _sizes_in_range(plan, DTYPES[dtype_name])
    # Under chaos (test_chaos.py's sweep) the smallest size only: the schedules are what it varies, and the
    # plain run covers both ends of every range.
    _run_and_check(plan, dtype_name, sizes[:1] if os.environ.get("LOOM_CPU_CHAOS") else sizes)


def _run_and_check(plan, dtype_name: str, sizes: list[int]) -> None:
    """Runs ``plan`` for CALLS calls at each size on host threads; checks every rank's output."""
    world, dtype = plan.world_size, DTYPES[dtype_name]
    calls = [(size, call) for size in sizes for call in range(CALLS)]
    data = {key: _inputs(zlib.crc32(repr(key).encode()), world, key[0], dtype) for key in calls}

    def body(bootstrap):
        communicator = _native.Communicator(bootstrap, host_only=True)
        executor = loom.Executor(communicator, verified=False)
        rank = communicator.rank
        for key in calls:
            source, target = plan_buffers(plan, rank, world, data[key][rank])
            executor.execute(plan, source, target)
            expected = _expected(plan, rank, data[key])
            got = target.astype(np.float64)
            reduced = plan.collective in ("allreduce", "reducescatter") or (
                plan.collective == "reduce" and rank == plan.root
            )
            if reduced and dtype_name.startswith("float"):
                tolerance = (2.0**-10 if dtype_name == "float16" else 2.0**-22) * (world + 2)
                scale = sum(np.abs(x.astype(np.float64)) for x in data[key])
                if plan.collective == "reducescatter":
                    piece = scale.size // world
                    scale = scale[rank * piece : (rank + 1) * piece]
                assert np.all(np.abs(got - expected) <= tolerance * scale + 1e-30), f"call {key}"
            else:
                assert np.array_equal(got, expected), f"call {key}: {np.flatnonzero(got != expected)[:8]}"
        return executor.stats()

    uid = _native.UniqueId.create("127.0.0.1")
    results = run_ranks(world, uid, body, timeout_ms=30000)
    for rank in range(world):
        if isinstance(results[rank], BaseException):
            raise results[rank]
        assert results[rank]["launches"] == len(calls)


def _run_counted_and_check(plan) -> None:
    """An all-to-all-v plan: CALLS calls of random per-peer row counts (zeros included), every rank's output
    against the senders' rows."""
    world = plan.world_size
    seeds = [zlib.crc32(plan.name.encode()) + call for call in range(CALLS)]

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        rank = bootstrap.rank
        rows = 40 * world
        source = np.zeros((rows, COLUMNS), np.float32)
        output = np.zeros((rows, COLUMNS), np.float32)
        row = COLUMNS * 4
        for seed in seeds:
            counts = random_counts(seed, world)
            mine = rank_input(seed, rank, counts)
            source[: len(mine)] = mine
            entries = []
            for sizes in (counts[rank], counts[:, rank]):
                starts = np.cumsum(sizes) - sizes
                entries.append([(int(at) * row, int(n) * row) for at, n in zip(starts, sizes, strict=True)])
            executor.execute_counted(plan, source, output, sends=entries[0], receives=entries[1])
            expected = expected_output(seed, rank, counts)
            assert np.array_equal(output[: len(expected)], expected), seed
        return executor.stats()

    results = run_ranks(world, _native.UniqueId.create("127.0.0.1"), body, timeout_ms=60000)
    for rank in range(world):
        if isinstance(results[rank], BaseException):
            raise results[rank]
        assert results[rank]["launches"] == CALLS


def test_the_proxy_lets_go_of_the_memories_of_contexts_that_are_dropped():
    """Each call on new buffers builds a context, which adds its and its peers' memories to the proxy; the
    cache drops the oldest beyond 64 per plan, and those give their memories back. Before, the proxy kept
    them all, mapped: on 4 H200s a peer's freed scratch, allocated anew, could then not be mapped."""
    plan = _plan("allreduce_hierarchical", 4, 2, False)

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        kept, held = [], []  # buffers stay alive, so every call has new addresses
        for call in range(100):
            kept.append((np.full(256, call, np.float32), np.zeros(256, np.float32)))
            executor.execute(plan, *kept[-1])
            held.append(executor.stats()["proxy_memories"])
        assert np.array_equal(kept[-1][1], np.full(256, 4 * 99, np.float32))
        return held, executor.stats()["contexts_built"]

    results = run_ranks(4, _native.UniqueId.create("127.0.0.1"), body, timeout_ms=60000)
    for rank in range(4):
        if isinstance(results[rank], BaseException):
            raise results[rank]
        held, contexts = results[rank]
        assert contexts == 100
        assert held[0] > 0 and held[-1] == 64 * held[0], held  # 64 contexts' worth: those cached


def test_hierarchical_rs_ag_gives_every_rank_the_same_bits():
    """Across 3 nodes each chunk of the sum is added up by one rank only: float32 outputs are equal bit for
    bit on every rank (twins that each summed whole shards would add in different orders)."""
    plan = _plan("allreduce_hierarchical_rs_ag", 6, 2, False)
    inputs = [np.random.default_rng(50 + r).standard_normal(6 * 1001).astype(np.float32) for r in range(6)]

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        output = np.zeros_like(inputs[0])
        executor.execute(plan, inputs[bootstrap.rank], output)
        return output

    results = run_ranks(6, _native.UniqueId.create("127.0.0.1"), body, timeout_ms=30000)
    for rank in range(6):
        if isinstance(results[rank], BaseException):
            raise results[rank]
        assert np.array_equal(results[rank].view(np.uint32), results[0].view(np.uint32)), rank
    np.testing.assert_allclose(results[0], sum(x.astype(np.float64) for x in inputs), rtol=1e-5, atol=1e-5)


def test_port_channel_packets_packed_in_scratch_then_forwarded():
    """MSCCL++'s pattern: pack locally (copy_packets), send the packed scratch with a port channel's
    put_packets (forwarded as packets: read_put_packet), unpack at the peer."""
    from loom.language import AllGather, Buffer, CollectiveProgram, PortChannel, Rank

    program = CollectiveProgram("ag_port_packets", AllGather(2, 1, False), 2, protocol="LL")
    with program:
        scratch = [Buffer(r, 2) for r in range(2)]
        for r in range(2):
            peer, rank = 1 - r, Rank(r)
            rank.copy_packets(scratch[r][0:1], rank.get_input_buffer()[0:1], tb=0)
            PortChannel(peer, r).put_packets(scratch[peer][1:2], scratch[r][0:1], tb=0)
            rank.copy(rank.get_output_buffer()[r : r + 1], rank.get_input_buffer()[0:1], tb=0)
            rank.unpack_packets(rank.get_output_buffer()[peer : peer + 1], scratch[r][1:2], tb=0)
    plan = loom.Plan.parse(program.to_json())
    _run_and_check(plan, "float32", [64, 4096])  # forwarded packets need whole 16-byte chunks (the error says so)


def test_read_reduces_over_peers_and_the_put_back_fuse_into_one_op_that_runs():
    """MSCCL++'s single-node all-reduce shape: each rank read-reduces its chunk from every peer, one
    peer at a time, then puts the sum back into the peers' chunks it read. The chain fuses into one
    read_reduce_send per thread block (reading each element, then writing it back), which runs right."""
    from loom.language import AllReduce, CollectiveProgram, MemoryChannel, Rank, SyncType

    world = 3
    program = CollectiveProgram("allpairs_read_reduce_send", AllReduce(world, 1, True), world)
    with program:
        channels = {(r, p): MemoryChannel(p, r) for r in range(world) for p in range(world) if p != r}
        for channel in channels.values():
            channel.signal(tb=0, relaxed=True)
        for channel in channels.values():
            channel.wait(tb=0, relaxed=True, data_sync=SyncType.after)
        for r in range(world):
            mine = Rank(r).get_input_buffer()[r : r + 1]
            for p in range(world):
                if p != r:
                    channels[(r, p)].reduce(mine, [Rank(p).get_input_buffer()[r : r + 1]], tb=0)
            for p in range(world):
                if p != r:
                    channels[(r, p)].put(Rank(p).get_input_buffer()[r : r + 1], mine, tb=0)
        for channel in channels.values():
            channel.signal(tb=0, data_sync=SyncType.before)
        for channel in channels.values():
            channel.wait(tb=0, data_sync=SyncType.after)
    text = program.to_json()
    ops = [op["op"] for op in json.loads(text)["gpus"][0]["threadblocks"][0]["ops"]]
    assert ops.count("read_reduce_send") == 1 and "read_reduce" not in ops and "put" not in ops, ops
    _run_and_check(loom.Plan.parse(text), "float32", [48, 3 * 4100])


def test_a_plan_whose_ranks_list_their_peers_rotated_sets_up_without_waiting_in_a_ring():
    """Each rank declares its channels starting with the next rank (as MSCCL++'s packet all-gather does):
    set up in the plan's order, every rank would wait for its first peer, which waits for its own."""
    from loom.language import AllGather, Buffer, CollectiveProgram, MemoryChannel, Rank

    world = 4
    program = CollectiveProgram("rotated_peers", AllGather(world, 1, False), world, protocol="LL")
    with program:
        scratch = [Buffer(r, world) for r in range(world)]
        for r in range(world):
            rank, peers = Rank(r), [(r + step) % world for step in range(1, world)]
            channels = {p: MemoryChannel(p, r) for p in peers}
            rank.copy(rank.get_output_buffer()[r : r + 1], rank.get_input_buffer()[0:1], tb=0)
            for tb, p in enumerate(peers):
                channels[p].put_packets(scratch[p][r : r + 1], rank.get_input_buffer()[0:1], tb=tb)
            for tb, p in enumerate(peers):
                rank.unpack_packets(rank.get_output_buffer()[p : p + 1], scratch[r][p : p + 1], tb=tb)
    text = program.to_json()
    assert [c["peer"] for c in json.loads(text)["gpus"][1]["channels"]] == [2, 3, 0]
    _run_and_check(loom.Plan.parse(text), "int32", [64, 4096])


def _alltoall_through_scratch(unit: int | None, iterations: int | None = None) -> str:
    """MSCCL++'s pipelined all-to-all shape: per peer, one thread block puts this rank's piece into the
    peer's scratch slice by slice and signals; another waits and copies each slice to the output."""
    from loom.language import AllToAll, Buffer, CollectiveProgram, LoopIterationContext, MemoryChannel, Rank, SyncType

    world = 3
    program = CollectiveProgram("alltoall_pipelined", AllToAll(world, 1, False), world)
    with program:
        scratch = {r: Buffer(r, world) for r in range(world)}
        channels = {(r, p): MemoryChannel(p, r) for r in range(world) for p in range(world) if p != r}
        handshakes = {(r, p): MemoryChannel(p, r) for r in range(world) for p in range(world) if p != r}
        for (_, p), channel in handshakes.items():
            channel.signal(tb=p, relaxed=True)
            channel.wait(tb=p, relaxed=True, data_sync=SyncType.after)
        with LoopIterationContext(unit=unit, iterations=iterations):
            for (r, p), channel in channels.items():
                rank = Rank(r)
                channel.put(scratch[p][r : r + 1], rank.get_input_buffer()[p : p + 1], tb=p)
                channel.signal(tb=p, data_sync=SyncType.before)
                channel.wait(tb=world + p, data_sync=SyncType.after)
                rank.copy(rank.get_output_buffer()[p : p + 1], scratch[r][p : p + 1], tb=world + p)
        for r in range(world):
            rank = Rank(r)
            rank.copy(rank.get_output_buffer()[r : r + 1], rank.get_input_buffer()[r : r + 1], tb=2 * world)
    return program.to_json()


def test_a_pipeline_sized_in_bytes_runs_as_many_iterations_as_the_size_needs():
    """LoopIterationContext(unit=...) as MSCCL++ writes it: at 3 x 4100 bytes a rank's 4100-byte piece
    takes 65 iterations of 64 bytes (the last one short), at 48 bytes one; both give the all-to-all."""
    text = _alltoall_through_scratch(unit=64)
    pipelines = [op for op in json.loads(text)["gpus"][0]["threadblocks"][0]["ops"] if op["op"] == "pipeline"]
    assert [p.get("unit_bytes") for p in pipelines] == [64], pipelines
    _run_and_check(loom.Plan.parse(text), "int32", [48, 3 * 4100, 3 * 64 * 7])
    _run_and_check(loom.Plan.parse(_alltoall_through_scratch(unit=None, iterations=5)), "int32", [48, 3 * 4100])


def test_a_signal_queued_as_a_rank_ends_its_last_call_still_reaches_the_peer():
    """MSCCL++'s multi-node send/recv: each rank sends its input to the next over a port channel with
    put_with_signal and waits for the previous one's. A rank's program can end while its proxy still
    holds that put: tearing the executor down must carry it out, or the next rank waits forever
    (before the fix, about one run in four of this shape timed out)."""
    from loom.language import CollectiveProgram, PortChannel, Rank, SendRecv, SyncType

    world = 4
    program = CollectiveProgram("ring_send_recv", SendRecv(world, 1, False), world)
    with program:
        next_channels = {r: PortChannel((r + 1) % world, r) for r in range(world)}
        prev_channels = {r: PortChannel((r - 1) % world, r) for r in range(world)}
        for r in range(world):
            prev_channels[r].signal(tb=0, data_sync=SyncType.none)
            next_channels[r].wait(tb=0, data_sync=SyncType.after)
            peer_output = Rank((r + 1) % world).get_output_buffer()
            next_channels[r].put_with_signal(peer_output[:], Rank(r).get_input_buffer()[:], tb=0)
            prev_channels[r].wait(tb=0, data_sync=SyncType.none)
    plan = loom.Plan.parse(program.to_json())
    for _ in range(6):
        _run_and_check(plan, "int32", [1024])
