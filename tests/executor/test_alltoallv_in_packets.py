"""All-to-all-v in LL packets on the CPU backend (ranks on host threads; issue 39's eager small messages):
``alltoallv_packet`` plans through ``Executor.execute_counted`` against NumPy over more calls than the two
scratch halves, with zeros and entries that start and end off 16-byte boundaries; a table read when the
call runs; a send whose size differs from its receive (the receiver names the sender and both sizes); an
entry above the plan's capacity refused before anything moves."""

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
from alltoallv_cases import COLUMNS, expected_output, mismatched_calls, random_counts, rank_input  # noqa: E402
from loom.errors import InvalidArgumentError  # noqa: E402
from rank_threads import run_local_ranks  # noqa: E402

CALLS = 5  # more than the two halves of the packet regions, so each half is written again
ROW = COLUMNS * 4


def _plan(world: int, capacity: int = 1 << 16):
    return _native.Plan.parse(compile_algorithm("alltoallv_packet", world, max_message_size=capacity))


def _entries(counts: np.ndarray) -> list[tuple[int, int]]:
    starts = np.cumsum(counts) - counts
    return [(int(start) * ROW, int(count) * ROW) for start, count in zip(starts, counts, strict=True)]


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_packets_carry_random_splits_exactly(world):
    plan = _plan(world)
    seeds = [500 * world + call for call in range(CALLS)]

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True))
        rank = bootstrap.rank
        source = np.zeros((40 * world, COLUMNS), np.float32)
        output = np.full((40 * world, COLUMNS), -7.0, np.float32)
        for seed in seeds:
            counts = random_counts(seed, world)
            mine = rank_input(seed, rank, counts)
            source[: len(mine)] = mine
            output[:] = -7.0
            executor.execute_counted(
                plan, source, output, sends=_entries(counts[rank]), receives=_entries(counts[:, rank])
            )
            expected = expected_output(seed, rank, counts)
            assert np.array_equal(output[: len(expected)], expected), seed
            assert np.all(output[len(expected) :] == -7.0), "rows past the last entry stay untouched"
        return executor.stats()

    results = run_local_ranks(world, body, timeout_ms=60000)
    assert all(stats["launches"] == CALLS and stats["contexts_built"] == 1 for stats in results.values()), results


def test_odd_byte_counts_and_a_table_read_when_the_call_runs():
    """Bytes, not rows: entries of any length at any offset (the last unit of an entry is short), and a
    table in memory the call reads as it runs, changed between calls on the same buffers."""
    world = 3
    plan = _plan(world, capacity=4096)

    def sizes(call: int) -> np.ndarray:
        return np.random.default_rng(call).integers(0, 1000, size=(world, world))

    def payload(call: int, sender: int, receiver: int, length: int) -> np.ndarray:
        return np.random.default_rng([call, sender, receiver]).integers(0, 256, length, dtype=np.uint8)

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True))
        rank = bootstrap.rank
        # float32 buffers (what the executor takes) written and read byte by byte through uint8 views
        source_words, output_words = np.zeros(1024, np.float32), np.zeros(1024, np.float32)
        source, output = source_words.view(np.uint8), output_words.view(np.uint8)
        table = np.zeros((2 * world, 2), np.int64)
        for call in range(CALLS):
            bytes_ = sizes(call)
            # Entries start 3 bytes apart, so that no start is aligned.
            at = 5
            for p in range(world):
                table[p] = (at, bytes_[rank, p])
                source[at : at + bytes_[rank, p]] = payload(call, rank, p, int(bytes_[rank, p]))
                at += int(bytes_[rank, p]) + 3
            at = 1
            for q in range(world):
                table[world + q] = (at, bytes_[q, rank])
                at += int(bytes_[q, rank]) + 3
            output[:] = 0xA5
            executor.execute_counted(plan, source_words, output_words, entries=table)
            for q in range(world):
                start, length = int(table[world + q, 0]), int(table[world + q, 1])
                assert np.array_equal(output[start : start + length], payload(call, q, rank, length)), (call, q)
                assert output[start + length] == 0xA5, "the byte after an entry stays untouched"
        return True

    run_local_ranks(world, body, timeout_ms=60000)


def test_a_send_whose_size_differs_from_its_receive_is_named_by_the_receiver(monkeypatch):
    monkeypatch.setenv("LOOM_DEVICE_TIMEOUT_MS", "2000")
    results = mismatched_calls(_plan(2), sent=48)
    receiver = results[1]
    assert receiver and isinstance(receiver[0], InvalidArgumentError), receiver
    text = str(receiver[0])
    expected = "rank 1, thread block 0, op 1: a receive entry of 16 bytes meets a send of 48 bytes from rank 0"
    assert expected in text, text
    assert "must be aborted" in str(receiver[1]), receiver


def test_an_entry_above_the_capacity_is_refused_before_anything_moves():
    plan = _plan(2, capacity=256)

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True))
        source, output = np.ones(256, np.float32), np.zeros(256, np.float32)
        with pytest.raises(InvalidArgumentError, match=r"an entry of 512 bytes is above the largest plan"):
            executor.execute_counted(plan, source, output, sends=[(0, 0), (0, 512)], receives=[(0, 0), (0, 512)])
        return executor.stats()["launches"]

    assert run_local_ranks(2, body) == {0: 0, 1: 0}
