"""loom.Communicator.split on the CPU backend (ranks on host threads): subgroups by color and key, a split
of a split, NOCOLOR, and each subgroup running the bundled plans of its own size against numpy."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

_native = pytest.importorskip("loom._native", reason="the native module is not built")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import loom  # noqa: E402
from loom.errors import InvalidArgumentError  # noqa: E402
from rank_threads import run_local_ranks  # noqa: E402

WORLD = 4


def _run(world: int, body):
    return run_local_ranks(world, body)


def _data(rank: int, count: int) -> np.ndarray:
    return np.random.default_rng(200 + rank).standard_normal(count).astype(np.float32)


def test_split_groups_run_their_own_plans_against_numpy():
    count = 2048
    inputs = [_data(r, count) for r in range(WORLD)]

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        # Ranks {0, 2} and {1, 3}, each group in reverse order of rank.
        half = comm.split(comm.rank % 2, key=-comm.rank)
        members = half.parent_ranks
        assert members == sorted((r for r in range(WORLD) if r % 2 == comm.rank % 2), reverse=True)
        assert (half.rank, half.world_size) == (members.index(comm.rank), 2)

        tensor = inputs[comm.rank].copy()
        half.all_reduce(tensor)
        np.testing.assert_allclose(tensor, sum(inputs[r].astype(np.float64) for r in members), rtol=1e-5, atol=1e-5)
        gathered = np.zeros(count * 2, np.float32)
        half.all_gather(gathered, inputs[comm.rank])
        np.testing.assert_array_equal(gathered, np.concatenate([inputs[r] for r in members]))

        # A split of the split: one rank each, and NOCOLOR on the rest.
        single = half.split(0 if half.rank == 0 else None)
        assert (single is None) == (half.rank != 0)
        if single is not None:
            assert (single.world_size, single.parent_ranks) == (1, [0])
            alone = inputs[comm.rank].copy()
            single.all_reduce(alone)
            np.testing.assert_array_equal(alone, inputs[comm.rank])
            assert single.abort()

        # The parent still runs after its children, and the children's plans were of their size.
        whole = inputs[comm.rank].copy()
        comm.all_reduce(whole)
        np.testing.assert_allclose(whole, sum(x.astype(np.float64) for x in inputs), rtol=1e-5, atol=1e-5)
        assert half.abort()
        return half.executor is None

    assert all(_run(WORLD, body).values())


def test_split_arguments_are_checked():
    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        with pytest.raises(InvalidArgumentError, match="color: expected a 32-bit integer, got 'a'"):
            comm.split("a")
        with pytest.raises(loom.LoomError, match="rank 1 passed a negative color other than NOCOLOR"):
            comm.split(-3 if comm.rank == 1 else 0)
        return True

    assert all(_run(2, body).values())


def test_split_shares_its_parents_proxy():
    """A split on its parent's device uses the parent's proxy for its port channels (one thread for both):
    both run a port-channel all-to-all against numpy, in turns, and the parent's keeps running after the
    child is aborted."""
    from loom.compiler.driver import compile_algorithm

    plans = {
        size: _native.Plan.parse(compile_algorithm("alltoall_port", size, verify=False, min_message_size=0))
        for size in (WORLD, 2)
    }
    count = 64  # per rank, a multiple of every world size
    inputs = [_data(r, count) for r in range(WORLD)]

    def expected(members: list[int], me: int) -> np.ndarray:
        piece = count // len(members)
        at = members.index(me)
        return np.concatenate([inputs[r][at * piece : (at + 1) * piece] for r in members])

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        half = comm.split(comm.rank // 2)
        for _ in range(2):
            for group, members in ((comm, list(range(WORLD))), (half, half.parent_ranks)):
                output = np.zeros(count, np.float32)
                group.executor.execute(plans[group.world_size], inputs[comm.rank], output)
                np.testing.assert_array_equal(output, expected(members, comm.rank))
        shared = (comm.executor.stats()["proxy_sharers"], half.executor.stats()["proxy_sharers"])
        assert half.abort()
        output = np.zeros(count, np.float32)
        comm.executor.execute(plans[WORLD], inputs[comm.rank], output)
        np.testing.assert_array_equal(output, expected(list(range(WORLD)), comm.rank))
        return shared, comm.executor.stats()["proxy_sharers"]

    assert set(_run(WORLD, body).values()) == {((2, 2), 1)}
