"""Symmetric windows on the CPU backend (ranks on host threads; issue 39, registered buffers): calls whose
buffers lie in windows every rank registered together exchange no addresses once a plan has set up on them
(stats ``buffer_exchanges`` against ``window_calls``), at any offsets that agree across ranks, for plans of
fixed sizes and for counted (all-to-all-v) calls; results against NumPy. And the refusals, on every rank
alike: windows of different sizes, overlapping windows, buffers at different offsets, an unknown handle."""

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
from alltoallv_cases import COLUMNS, expected_output, random_counts, rank_input  # noqa: E402
from loom.errors import InvalidArgumentError  # noqa: E402
from rank_threads import run_local_ranks  # noqa: E402

WORLD = 4
PIECE = 64  # float32 elements each rank contributes to an all-gather


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))


def _plan(name: str, world: int = WORLD):
    return _native.Plan.parse(compile_algorithm(name, world, verify=False, min_message_size=0))


def _all_gather_calls(executor, rank: int, source_window, target_window, offsets) -> None:
    plan = _plan("allgather_fullmesh")
    for call, offset in enumerate(offsets):
        source = source_window[offset : offset + PIECE]
        target = target_window[offset * WORLD : (offset + PIECE) * WORLD]
        source[:] = np.arange(PIECE, dtype=np.float32) + 1000 * rank + call
        executor.execute(plan, source, target)
        expected = np.concatenate([np.arange(PIECE, dtype=np.float32) + 1000 * r + call for r in range(WORLD)])
        assert np.array_equal(target, expected), (rank, call, offset)


def test_calls_in_windows_exchange_no_addresses_once_set_up():
    """One setup (where the ranks check the offsets), then calls at new offsets shift and exchange nothing."""
    offsets = [0, 0, 128, 64, 192, 0]

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        rank = bootstrap.rank
        source_window = np.zeros(256 + PIECE, np.float32)
        target_window = np.zeros((256 + PIECE) * WORLD, np.float32)
        executor.register_window(source_window)
        executor.register_window(target_window)
        _all_gather_calls(executor, rank, source_window, target_window, offsets)
        return executor.stats()

    for stats in run_local_ranks(WORLD, body).values():
        assert stats["contexts_built"] == 1
        assert stats["buffer_exchanges"] == 1, "only the setup call meets the other ranks"
        assert stats["window_calls"] == len(offsets)
        assert stats["launches"] == len(offsets)


def test_without_windows_every_call_exchanges_and_after_deregistering_again():
    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        rank = bootstrap.rank
        source_window = np.zeros(2 * PIECE, np.float32)
        target_window = np.zeros(2 * PIECE * WORLD, np.float32)
        _all_gather_calls(executor, rank, source_window, target_window, [0, PIECE])
        without = executor.stats()
        handles = [executor.register_window(source_window), executor.register_window(target_window)]
        _all_gather_calls(executor, rank, source_window, target_window, [0, PIECE, 0])
        within = executor.stats()
        for handle in handles:
            executor.deregister_window(handle)
        _all_gather_calls(executor, rank, source_window, target_window, [PIECE, 0])
        return without, within, executor.stats(), handles

    for without, within, after, handles in run_local_ranks(WORLD, body).values():
        assert handles == [1, 2], "handles count up in registration order, alike on every rank"
        assert (without["buffer_exchanges"], without["window_calls"]) == (2, 0)
        assert (within["buffer_exchanges"], within["window_calls"]) == (3, 3)
        assert (after["buffer_exchanges"], after["window_calls"]) == (5, 3)


def test_counted_calls_in_windows_follow_new_splits_without_exchanging():
    world, calls = 3, 4
    rows = 200

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        rank = comm.rank
        source_window = np.zeros((rows, COLUMNS), np.float32)
        output_window = np.full((rows, COLUMNS), -7.0, np.float32)
        with comm.register(source_window), comm.register(output_window):
            for call in range(calls):
                seed = 500 + call
                counts = random_counts(seed, world)
                source = source_window[: int(counts[rank].sum())]
                source[:] = rank_input(seed, rank, counts)
                comm.all_to_all(
                    output_window,
                    source_window,
                    output_splits=counts[:, rank].tolist(),
                    input_splits=counts[rank].tolist(),
                )
                expected = expected_output(seed, rank, counts)
                assert np.array_equal(output_window[: len(expected)], expected), call
            stats = comm.executor.stats()
        return stats

    for stats in run_local_ranks(world, body, timeout_ms=60000).values():
        assert stats["window_calls"] == calls
        assert stats["buffer_exchanges"] == 1


def test_buffers_at_different_offsets_are_refused_on_every_rank():
    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        rank = bootstrap.rank
        source_window = np.zeros(2 * PIECE, np.float32)
        target_window = np.zeros(2 * PIECE * WORLD, np.float32)
        executor.register_window(source_window)
        executor.register_window(target_window)
        offset = PIECE if rank == 2 else 0
        with pytest.raises(InvalidArgumentError) as error:
            _all_gather_calls(executor, rank, source_window, target_window, [offset])
        return str(error.value)

    for rank, message in run_local_ranks(WORLD, body).items():
        assert "the same windows at the same offsets on every rank" in message
        assert "rank 2's lie in windows 1 (input, offset 256)" in message or rank == 2
        assert "offset 0" in message


def test_a_rank_outside_its_windows_is_refused_where_the_ranks_meet():
    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        rank = bootstrap.rank
        source_window = np.zeros(PIECE, np.float32)
        target_window = np.zeros(PIECE * WORLD, np.float32)
        if rank != 1:  # rank 1 registers windows elsewhere
            executor.register_window(source_window)
            executor.register_window(target_window)
        else:
            executor.register_window(np.zeros(PIECE, np.float32))
            executor.register_window(np.zeros(PIECE * WORLD, np.float32))
        with pytest.raises(InvalidArgumentError) as error:
            _all_gather_calls(executor, rank, source_window, target_window, [0])
        return str(error.value)

    for message in run_local_ranks(WORLD, body).values():
        assert "in no symmetric window" in message


def test_registrations_that_differ_are_refused_on_every_rank():
    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        rank = bootstrap.rank
        messages = []
        with pytest.raises(InvalidArgumentError) as error:
            executor.register_window(np.zeros(16 if rank == 3 else 8, np.float32))
        messages.append(str(error.value))
        window = np.zeros(32, np.float32)
        executor.register_window(window)
        with pytest.raises(InvalidArgumentError) as error:  # rank 0 overlaps its first window
            executor.register_window(window[8:16] if rank == 0 else np.zeros(8, np.float32))
        messages.append(str(error.value))
        with pytest.raises(InvalidArgumentError) as error:
            executor.deregister_window(7 if rank == 1 else 1)
        messages.append(str(error.value))
        executor.deregister_window(1)
        return messages

    for sizes, overlap, unknown in run_local_ranks(WORLD, body).values():
        assert "registerWindow: refused on every rank; rank 3 gives bytes 64, rank 0 32" in sizes
        assert "rank 0: base: the 32 bytes overlap a window this rank registered" in overlap
        assert "deregisterWindow: refused on every rank; rank 1: window: 7 is not registered" in unknown
