"""World sizes with no bundled plan (issue 38): loom.Communicator compiles the library plan of each call
through the JIT on first use (loom.compiler.jit_plans), rank 0 compiles and every rank runs its text; a
compile error is the same error on every rank. CPU backend, ranks on host threads; processes:
tests/executor/test_multiprocess_cpu.py."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

_native = pytest.importorskip("loom._native", reason="the native module is not built")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import loom  # noqa: E402
import loom.runtime.communicator as communicator_module  # noqa: E402
from loom.algorithms import ALGORITHMS  # noqa: E402
from loom.compiler.jit_plans import COUNTED_CHOICES, JIT_COLLECTIVES, choose, plan_for_call  # noqa: E402
from loom.errors import LoomError  # noqa: E402
from rank_threads import run_local_ranks  # noqa: E402

FIXED_SIZE = [collective for collective in JIT_COLLECTIVES if collective not in COUNTED_CHOICES]


def _run(world: int, body):
    return run_local_ranks(world, body)


@pytest.mark.parametrize("world", [3, 5, 6, 7])
def test_every_collective_has_a_verified_plan_at_odd_world_sizes(world, tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    for collective in FIXED_SIZE:
        for size in (4096 * world, 4 << 20):
            choice = choose(collective, world, world, size)
            assert choice is not None and ALGORITHMS[choice.algorithm].collective == collective
            found = plan_for_call(collective, world_size=world, ranks_per_node=world, message_bytes=size, inplace=False)
            assert found.name.startswith(f"{choice.algorithm}_{world}r_")
    again = plan_for_call(
        "allreduce", world_size=world, ranks_per_node=world, message_bytes=4096 * world, inplace=False
    )
    assert again.from_cache  # cached by content hash
    # All-to-all-v: one counted plan serves every size of the shape.
    counted = choose("alltoallv", world, world, 1)
    assert counted.algorithm == "alltoallv_fullmesh" and (counted.min_bytes, counted.max_bytes) == (0, 1 << 30)
    found = plan_for_call("alltoallv", world_size=world, ranks_per_node=world, message_bytes=1, inplace=False)
    assert found.name == f"alltoallv_fullmesh_{world}r_0_{1 << 30}"


@pytest.mark.parametrize(("world", "per_node"), [(2, 1), (3, 1), (6, 2), (12, 4), (12, 6)])
def test_every_collective_has_a_verified_plan_across_nodes(world, per_node, tmp_path, monkeypatch):
    # One GPU per node and more than 2 nodes: the all-reduce is allreduce_hierarchical_rs_ag where
    # allreduce_hierarchical (2 nodes of 2 and more) does not run; the others run any such shape.
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    sizes = (4096 * world, 4 << 20) if world == 6 else (4096 * world,)
    # reduce_read reads peers' memory, which a port channel cannot: no library reduce runs across nodes.
    assert choose("reduce", world, per_node, 4096 * world) is None
    # All-to-all-v across nodes: alltoallv_fullmesh over port channels between the nodes, one plan for every size.
    counted = plan_for_call("alltoallv", world_size=world, ranks_per_node=per_node, message_bytes=1, inplace=False)
    assert counted.name == f"alltoallv_fullmesh_{world // per_node}x{per_node}_0_{1 << 30}"
    for collective in (c for c in FIXED_SIZE if c != "reduce"):
        for size in sizes:
            choice = choose(collective, world, per_node, size)
            assert choice is not None and ALGORITHMS[choice.algorithm].collective == collective, (collective, size)
            shape = {"world_size": world, "ranks_per_node": per_node}
            found = plan_for_call(collective, **shape, message_bytes=size, inplace=True)
            assert found.name.startswith(f"{choice.algorithm}_{world // per_node}x{per_node}_")
    # Up to 64 KiB on 2 nodes (of any size), the packets that cross the link once.
    two_nodes = world // per_node == 2
    expected = "allreduce_hierarchical_packet" if two_nodes else "allreduce_hierarchical_rs_ag"
    assert choose("allreduce", world, per_node, 4096).algorithm == expected
    if (world // per_node, per_node) == (2, 6):
        assert choose("allreduce", world, per_node, 1 << 20).algorithm == "allreduce_hierarchical"


def test_a_shape_no_library_algorithm_runs_is_a_clear_error():
    # 12 ranks on one node: the library's algorithms run 2 to 8 per node.
    assert choose("allreduce", 12, 12, 4096) is None
    with pytest.raises(LoomError, match="no library algorithm serves allreduce of 4096 bytes over 12 ranks, 12 per"):
        plan_for_call("allreduce", world_size=12, ranks_per_node=12, message_bytes=4096, inplace=False)


def test_the_jit_plan_command_prints_the_plan_file_or_says_why_there_is_none(tmp_path, monkeypatch, capsys):
    # What libloom_nccl.so runs on rank 0: the path on stdout; exit 3 when no library algorithm runs the
    # shape, 4 when none serves the size (it remembers the first for the collective, the second per size).
    from loom.tools.cli import main

    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    common = ["jit-plan", "--collective", "allreduce", "--ranks-per-node"]
    assert main([*common, "3", "--world-size", "3", "--bytes", "4096", "--inplace"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.parent == tmp_path / "jit"
    assert '"name": "allreduce_allpairs_packet_3r_0_5793_inplace"' in path.read_text()
    assert main([*common, "12", "--world-size", "12", "--bytes", "4096"]) == 3
    assert "no library algorithm serves allreduce of 4096 bytes over 12 ranks, 12 per node (nor any" in (
        capsys.readouterr().err
    )
    assert main([*common, "3", "--world-size", "3", "--bytes", str(3 << 30)]) == 4
    assert "(there are plans for other sizes)" in capsys.readouterr().err


def test_the_jit_plan_command_compiles_a_pairs_packet_plan(tmp_path, monkeypatch, capsys):
    # libloom_nccl.so under LOOM_P2P_PACKET_BYTES: the eager packet plan of two ranks of one node, of that capacity.
    from loom.compiler.jit_plans import packet_pair_plan
    from loom.errors import InvalidArgumentError
    from loom.tools.cli import main

    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    pair = ["jit-plan", "--collective", "alltoallv", "--world-size", "2", "--bytes", "0", "--packets", "4096"]
    assert main([*pair, "--ranks-per-node", "2"]) == 0
    text = Path(capsys.readouterr().out.strip()).read_text()
    assert '"name": "alltoallv_packet_2r_0_4096"' in text and '"max_message_bytes": 4096' in text
    assert main([*pair, "--ranks-per-node", "1"]) == 3  # two nodes: packets go through memory channels only
    assert "--packets is for alltoallv of 2 ranks on one node" in capsys.readouterr().err
    with pytest.raises(InvalidArgumentError, match=r"packet capacity: expected 1 to 1048576 bytes, got 2097152"):
        packet_pair_plan(2 << 20)


@pytest.mark.parametrize("world", [3, 6])
def test_collectives_at_odd_world_sizes_match_numpy(world, tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    count = 600 * world
    inputs = [np.random.default_rng(7 + r).standard_normal(count).astype(np.float32) for r in range(world)]
    total = sum(x.astype(np.float64) for x in inputs)

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        rank, piece = comm.rank, count // world
        mine = inputs[rank].copy()
        comm.all_reduce(mine)
        np.testing.assert_allclose(mine, total, rtol=1e-5, atol=1e-5)
        gathered = np.zeros(count * world, np.float32)
        comm.all_gather(gathered, inputs[rank])
        np.testing.assert_array_equal(gathered, np.concatenate(inputs))
        scattered = np.zeros(piece, np.float32)
        comm.reduce_scatter(scattered, inputs[rank])
        np.testing.assert_allclose(scattered, total[rank * piece : (rank + 1) * piece], rtol=1e-5, atol=1e-5)
        exchanged = np.zeros(count, np.float32)
        comm.all_to_all(exchanged, inputs[rank])
        np.testing.assert_array_equal(exchanged, np.concatenate([x[rank * piece : (rank + 1) * piece] for x in inputs]))
        shared = inputs[rank].copy()
        comm.broadcast(shared, root=world - 1)
        np.testing.assert_array_equal(shared, inputs[world - 1])
        reduced = np.full(count, -7.0, np.float32)
        comm.reduce(inputs[rank], root=1, output=reduced)
        if rank == 1:
            np.testing.assert_allclose(reduced, total, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(reduced, np.full(count, -7.0, np.float32))  # a non-root's is not written
        return comm.executor.stats()["launches"]

    assert all(launches == 6 for launches in _run(world, body).values())
    assert len(list((tmp_path / "jit").glob("*.json"))) == 6  # rank 0 compiled one plan per collective


def test_a_compile_error_on_rank_0_is_the_same_error_on_every_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))

    def broken(collective, **shape):
        raise LoomError(f"JIT plan for {collective}: the compiler failed on purpose")

    monkeypatch.setattr(communicator_module, "plan_for_call", broken)

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        with pytest.raises(LoomError, match="rank 0 could not compile a plan for this call: JIT plan for allreduce"):
            comm.all_reduce(np.ones(64, np.float32))
        return True

    assert all(_run(3, body).values())
