"""Counted calls of several executors in one launch (Executor::executeCountedGroup, issue 39: a send/recv group
with several peers, one call per peer's two-rank communicator) on the CPU backend: a ring over 3 ranks through
pair communicators made by split, checked against NumPy over several calls of new sizes, and the refusals, each
naming the call it refuses, made before any call is set up."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from loom.compiler.driver import compile_algorithm

_native = pytest.importorskip("loom._native", reason="the native module is not built")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import loom  # noqa: E402
from loom.errors import InvalidArgumentError  # noqa: E402
from pair_communicators import pair_communicators  # noqa: E402
from rank_threads import run_local_ranks  # noqa: E402


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))


def _plan(world: int = 2, **options):
    return _native.Plan.parse(compile_algorithm("alltoallv_fullmesh", world, verify=False, **options))


def _call(executor, plan, source, target, sends, receives):
    """One call of a group: the native executor, the plan, the buffers by address and the entries."""
    return (
        executor._native,
        plan,
        source.ctypes.data,
        source.nbytes,
        target.ctypes.data,
        target.nbytes,
        sends,
        receives,
    )


def test_a_ring_over_three_ranks_runs_each_ranks_two_pairs_in_one_group():
    world, plan = 3, _plan()

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        rank = comm.rank
        mine = pair_communicators(comm)
        to, frm = (rank + 1) % world, (rank - 1) % world
        for count in (1, 37, 1000, 4096):
            source = np.arange(count, dtype=np.float32) + 1000 * rank
            target = np.full(count, -1.0, np.float32)
            empty = np.zeros(0, np.float32)
            calls = []
            for pair, split in sorted(mine.items()):
                peer = 1 - split.rank  # the other member's rank in the pair
                sends, receives = [(0, 0), (0, 0)], [(0, 0), (0, 0)]
                if to in pair and to != rank:
                    sends[peer] = (0, source.nbytes)
                if frm in pair and frm != rank:
                    receives[peer] = (0, target.nbytes)
                send_buffer = source if sends[peer][1] else empty
                recv_buffer = target if receives[peer][1] else empty
                calls.append(_call(split.executor, plan, send_buffer, recv_buffer, sends, receives))
            _native.Executor.execute_counted_group(calls)
            expected = np.arange(count, dtype=np.float32) + 1000 * frm
            assert np.array_equal(target, expected), (rank, count)
        return [split.executor.stats()["grouped_calls"] for split in mine.values()]

    results = run_local_ranks(world, body, timeout_ms=60000)
    assert all(counts == [4, 4] for counts in results.values()), results


def test_a_group_is_refused_before_anything_is_set_up_naming_the_call():
    two, three = _plan(), _plan(3)
    narrow = _plan(num_threads_per_block=256)

    def body(bootstrap):
        comm = _native.Communicator(bootstrap, host_only=True)
        first, second = loom.Executor(comm, verified=False), loom.Executor(comm, verified=False)
        buffer = np.zeros(4, np.float32)
        errors = []
        for calls in (
            [_call(first, two, buffer, buffer, [], []), _call(first, two, buffer, buffer, [], [])],
            [_call(first, two, buffer, buffer, [], []), _call(second, three, buffer, buffer, [], [])],
            [_call(first, two, buffer, buffer, [], []), _call(second, narrow, buffer, buffer, [], [])],
            [_call(first, two, buffer, buffer, [], [])] * 17,
        ):
            with pytest.raises(InvalidArgumentError) as error:
                _native.Executor.execute_counted_group(calls)
            errors.append(str(error.value))
        return errors

    errors = run_local_ranks(1, body)[0]
    assert "calls[1]: the executor of calls[0] again; a group takes one call per executor" in errors[0], errors[0]
    assert "calls[1]: plan 'alltoallv_fullmesh_3r" in errors[1] and "a group takes calls of two-rank plans" in errors[1]
    assert "threads per block, calls[0]'s" in errors[2] and "one launch has one block size" in errors[2], errors[2]
    assert "calls: 17 calls; one launch takes at most 16" in errors[3], errors[3]
