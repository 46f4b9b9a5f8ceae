"""loom._native.Communicator, RegisteredMemory and Connection from Python, on host memory (numpy
arrays), with ranks on threads: host identity, memory exchange, argument errors, and the TCP
transport moving bytes and values between ranks."""

from __future__ import annotations

import loom
import numpy as np
import pytest

_native = pytest.importorskip("loom._native", reason="loom._native is not built ('bash scripts/setup.sh')")

from rank_threads import run_ranks  # noqa: E402 (needs the native module checked first)


def _with_communicators(world: int, body):
    uid = _native.UniqueId.create("127.0.0.1")

    def rank_body(bootstrap):
        return body(_native.Communicator(bootstrap, host_only=True))

    results = run_ranks(world, uid, rank_body)
    for rank, result in results.items():
        if isinstance(result, BaseException):
            raise AssertionError(f"rank {rank} failed: {result!r}") from result
    return results


def test_communicator_knows_hosts_and_exchanges_memory() -> None:
    def body(comm):
        array = np.arange(1000, dtype=np.uint64) + comm.rank * 10**6
        memory = comm.register_memory(array.ctypes.data, array.nbytes, "tcp")
        assert (memory.owner_rank, memory.nbytes, memory.location, memory.device) == (comm.rank, 8000, "host", -1)
        assert memory.transports == ["tcp"] and memory.is_local
        peer = (comm.rank + 1) % comm.world_size
        comm.send_memory(memory, peer, 5)
        remote = comm.recv_memory((comm.rank - 1) % comm.world_size, 5)
        # Ranks are threads of one process: the peer's array is readable at its address.
        view = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint64 * 1000).from_address(remote.address))
        assert view[999] == remote.owner_rank * 10**6 + 999
        return (comm.world_size, comm.node_count, comm.local_rank, comm.node(0), len(memory.serialize()) > 0)

    results = _with_communicators(3, body)
    assert results == {r: (3, 1, r, 0, True) for r in range(3)}


def test_bad_arguments_name_what_is_wrong() -> None:
    def body(comm):
        with pytest.raises(loom.InvalidArgumentError, match="unknown transport 'rdma'"):
            comm.register_memory(1 << 20, 64, "rdma")
        with pytest.raises(loom.InvalidArgumentError, match="CUDA IPC needs device memory"):
            comm.register_memory(np.zeros(8).ctypes.data, 64, ["cuda_ipc"])
        with pytest.raises(loom.InvalidArgumentError, match="peer 7 is not another rank"):
            comm.connect(7, "tcp", 1)
        with pytest.raises(loom.InvalidArgumentError, match="tag"):
            comm.send_memory(comm.register_memory(np.zeros(8).ctypes.data, 64, "tcp"), 1 - comm.rank, 1 << 60)

    _with_communicators(2, body)


def test_tcp_connection_writes_bytes_and_values() -> None:
    def body(comm):
        peer = 1 - comm.rank
        array = np.zeros(1 << 16, dtype=np.uint8)
        source = np.random.default_rng(comm.rank).integers(0, 256, size=1 << 16, dtype=np.uint8)
        flags = np.zeros(2, dtype=np.uint64)
        mine = comm.register_memory(array.ctypes.data, array.nbytes, "tcp")
        src = comm.register_memory(source.ctypes.data, source.nbytes, "tcp")
        flag = comm.register_memory(flags.ctypes.data, flags.nbytes, "tcp")
        comm.send_memory(mine, peer, 1)
        comm.send_memory(flag, peer, 2)
        theirs, their_flag = comm.recv_memory(peer, 1), comm.recv_memory(peer, 2)
        connection = comm.connect(peer, "tcp", 3)
        assert (connection.transport, connection.remote_rank) == ("tcp", peer)
        connection.write(theirs, 7, src, 100, 50000)
        connection.write_value(their_flag, 8, 42)
        connection.flush(10000)
        with pytest.raises(loom.InvalidArgumentError, match="outside"):
            connection.write(theirs, 60000, src, 0, 10000)
        expected = np.random.default_rng(peer).integers(0, 256, size=1 << 16, dtype=np.uint8)
        # The registrations and the connection must outlive the peer's writes into them.
        return array, flags, expected, (mine, src, flag, connection)

    uid = _native.UniqueId.create("127.0.0.1")
    # Each rank checks what it received only after both flushed: a barrier through the bootstrap.

    def rank_body(bootstrap):
        comm = _native.Communicator(bootstrap, host_only=True)
        array, flags, expected, keep_alive = body(comm)
        bootstrap.barrier()  # both ranks flushed: every write has landed
        assert flags[1] == 42
        assert np.array_equal(array[7 : 7 + 50000], expected[100:50100])
        assert not array[:7].any() and not array[50007:].any()
        del keep_alive
        return True

    results = run_ranks(2, uid, rank_body)
    assert results == {0: True, 1: True}, results
