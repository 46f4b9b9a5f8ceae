"""All-to-all-v on the CPU backend (ranks on host threads; issue 39): ``Communicator.all_to_all`` with
random splits, zeros included, at 2, 3, 4 and 8 ranks over several calls against NumPy; a table in memory
the kernel reads when it runs, changed between calls on the same buffers (what a CUDA graph replay with new
device-side splits does); and the errors: a send whose size differs from its receive, entries outside their
buffers, bad splits. The plan is alltoallv_fullmesh, compiled by the JIT on first use."""

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

CALLS = 3


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))


def _plan(world: int, instances: int = 1):
    return _native.Plan.parse(compile_algorithm("alltoallv_fullmesh", world, instances=instances, verify=False))


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_all_to_all_with_random_splits_matches_numpy(world):
    seeds = [1000 * world + call for call in range(CALLS)]

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        rank = comm.rank
        for seed in seeds:
            counts = random_counts(seed, world)
            source = rank_input(seed, rank, counts)
            output = np.full((int(counts[:, rank].sum()) + 2, COLUMNS), -7.0, np.float32)  # 2 spare rows
            comm.all_to_all(output, source, output_splits=counts[:, rank].tolist(), input_splits=counts[rank].tolist())
            expected = expected_output(seed, rank, counts)
            assert np.array_equal(output[: len(expected)], expected), seed
            assert np.all(output[len(expected) :] == -7.0), "rows past the last entry stay untouched"
        return comm.executor.stats()

    results = run_local_ranks(world, body, timeout_ms=60000)
    assert all(stats["launches"] == CALLS for stats in results.values())


def test_equal_splits_and_all_zero_calls():
    world = 4

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        rank = comm.rank
        source = np.arange(8 * COLUMNS, dtype=np.float32).reshape(8, COLUMNS) + 100 * rank
        output = np.zeros_like(source)
        comm.all_to_all(output, source, input_splits=[2] * world)  # output_splits None: equal pieces
        expected = np.concatenate(
            [np.arange(8 * COLUMNS).reshape(8, COLUMNS)[2 * rank : 2 * rank + 2] + 100 * s for s in range(world)]
        ).astype(np.float32)
        assert np.array_equal(output, expected)
        before = output.copy()
        comm.all_to_all(output, source, output_splits=[0] * world, input_splits=[0] * world)
        assert np.array_equal(output, before), "a call of zero-byte entries moves nothing, and still completes"
        return True

    run_local_ranks(world, body)


def test_a_table_read_when_the_call_runs_follows_its_changes():
    """The same buffers and the same table object: what the table holds at each call is what moves."""
    world = 3
    plan = _plan(world, instances=2)
    seeds = [7, 8, 9]

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        rank = bootstrap.rank
        source = np.zeros((120, COLUMNS), np.float32)
        output = np.zeros((120, COLUMNS), np.float32)
        table = np.zeros((2 * world, 2), np.int64)
        row = COLUMNS * 4
        for seed in seeds:
            counts = random_counts(seed, world)
            mine = rank_input(seed, rank, counts)
            source[: len(mine)] = mine
            output[:] = 0
            sends, receives = counts[rank], counts[:, rank]
            table[:world, 0] = (np.cumsum(sends) - sends) * row
            table[:world, 1] = sends * row
            table[world:, 0] = (np.cumsum(receives) - receives) * row
            table[world:, 1] = receives * row
            executor.execute_counted(plan, source, output, entries=table)
            expected = expected_output(seed, rank, counts)
            assert np.array_equal(output[: len(expected)], expected), seed
        return executor.stats()

    results = run_local_ranks(world, body)
    assert all(stats["contexts_built"] == 1 for stats in results.values()), results


@pytest.mark.parametrize(("world", "per_node", "instances"), [(2, 1, 1), (4, 2, 2), (6, 2, 1)])
def test_peers_on_other_nodes_over_port_channels_match_numpy(world, per_node, instances):
    """Across nodes the proxy carries the published entries and the data (port channels; on the CPU backend
    the ranks are threads, the channels go through the proxy all the same), zeros included."""
    text = compile_algorithm("alltoallv_fullmesh", world, per_node, instances=instances, verify=False)
    plan = _native.Plan.parse(text)
    seeds = [40 + world + call for call in range(CALLS)]

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        rank = bootstrap.rank
        source = np.zeros((40 * world, COLUMNS), np.float32)
        output = np.full((40 * world, COLUMNS), -7.0, np.float32)
        row = COLUMNS * 4
        for seed in seeds:
            counts = random_counts(seed, world)
            mine = rank_input(seed, rank, counts)
            source[: len(mine)] = mine
            sends, receives = counts[rank], counts[:, rank]
            send_entries = [(int(o) * row, int(b) * row) for o, b in zip(np.cumsum(sends) - sends, sends, strict=True)]
            receive_entries = [
                (int(o) * row, int(b) * row) for o, b in zip(np.cumsum(receives) - receives, receives, strict=True)
            ]
            executor.execute_counted(plan, source, output, sends=send_entries, receives=receive_entries)
            expected = expected_output(seed, rank, counts)
            assert np.array_equal(output[: len(expected)], expected), seed
        return executor.stats()

    results = run_local_ranks(world, body, timeout_ms=60000)
    assert all(stats["launches"] == CALLS for stats in results.values())


@pytest.mark.parametrize("per_node", [2, 1], ids=["memory_channel", "port_channel"])
def test_a_send_larger_than_its_receive_stops_the_call_naming_both_sizes(monkeypatch, per_node):
    monkeypatch.setenv("LOOM_DEVICE_TIMEOUT_MS", "1000")
    plan = _native.Plan.parse(compile_algorithm("alltoallv_fullmesh", 2, per_node, verify=False))
    results = mismatched_calls(plan, sent=32)  # rank 0 sends 32 bytes to rank 1, which posts 16
    first, second = results[0]
    assert isinstance(first, InvalidArgumentError), first
    text = str(first)
    assert "a send of 32 bytes meets a receive entry of 16 bytes posted by rank 1" in text, text
    assert "rank 0, thread block" in text, text
    assert "must be aborted" in str(second), second
    waited, _ = results[1]
    # Rank 0 announces why it stopped: rank 1's waits end at once with rank 0's words, not at their timeout.
    assert "rank 0's call failed" in str(waited) and "a send of 32 bytes meets a receive entry of 16" in str(waited), (
        waited
    )


def test_entries_outside_their_buffers_are_refused_before_anything_moves():
    plan = _plan(2)

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        source, output = np.ones(16, np.float32), np.zeros(16, np.float32)
        errors = []
        for sends, receives in (
            ([(0, 32), (32, 64)], [(0, 32), (32, 32)]),  # sends[1] ends at 96 > 64 bytes
            ([(0, 32), (32, 32)], [(0, 16), (32, 16)]),  # every rank sends itself 32 bytes but receives 16
            ([(0, 32)], [(0, 32), (32, 32)]),  # one entry short
        ):
            with pytest.raises(InvalidArgumentError) as error:
                executor.execute_counted(plan, source, output, sends=sends, receives=receives)
            errors.append(str(error.value))
        # A table the kernel reads is checked as it is read: an entry past the end stops the call.
        table = np.array([[0, 32], [32, 32], [0, 32], [48, 32]], np.int64)  # receives[1] ends at 80
        with pytest.raises(InvalidArgumentError) as error:
            executor.execute_counted(plan, source, output, entries=table)
        errors.append(str(error.value))
        return errors

    results = run_local_ranks(2, body)
    errors = results[0]
    assert "sends[1]: bytes 32 to 96 run past the end of the 64-byte input" in errors[0], errors[0]
    assert "receives[0]: this rank sends itself 32 bytes but receives 16 from itself" in errors[1], errors[1]
    assert "sends: expected one entry per rank (2), got 1" in errors[2], errors[2]
    assert "an entry ends at byte 80, past the end of its 64-byte buffer" in errors[3], errors[3]


def test_bad_splits_name_the_argument():
    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        source, output = np.ones((6, 2), np.float32), np.zeros((6, 2), np.float32)
        errors = []
        for kwargs in (
            {"input_splits": [3, 4]},  # 7 rows of 6
            {"input_splits": [3, -1]},
            {"input_splits": [3, 3, 0]},
            {"output_splits": [3, 3], "input_splits": "33"},
        ):
            with pytest.raises(InvalidArgumentError) as error:
                comm.all_to_all(output, source, **kwargs)
            errors.append(str(error.value))
        return errors

    errors = run_local_ranks(2, body)[0]
    assert errors[0] == "input_splits: 7 rows in all, but the buffer has 6"
    assert errors[1] == "input_splits[1]: expected a row count of 0 or more, got -1"
    assert errors[2] == "input_splits: expected 2 row counts (one per rank), got 3"
    assert errors[3].startswith("input_splits: expected a sequence of 2 row counts")


def test_a_fixed_size_call_of_a_counted_plan_is_refused():
    plan = _plan(2)

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        with pytest.raises(InvalidArgumentError, match="sizes come with each call: run it with executeCounted"):
            executor.execute(plan, np.ones(16, np.float32), np.zeros(16, np.float32))
        return True

    run_local_ranks(2, body)
