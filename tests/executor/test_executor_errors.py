"""What a bad call to loom.Executor says: each error names the argument and what was expected; a rank
whose peer never calls ends with a timeout that names rank, thread block, op and channel."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from loom.compiler.driver import compile_algorithm
from loom.errors import InvalidArgumentError, LoomTimeoutError

_native = pytest.importorskip("loom._native", reason="the native module is not built")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import loom  # noqa: E402
from rank_threads import run_ranks  # noqa: E402


def _plan(name: str = "allreduce_allpairs_packet", world: int = 2, **options):
    return _native.Plan.parse(compile_algorithm(name, world, verify=False, **options))


def _on_ranks(world: int, body, timeout_ms: int = 20000):
    uid = _native.UniqueId.create("127.0.0.1")

    def run(bootstrap):
        communicator = _native.Communicator(bootstrap, host_only=True)
        return body(loom.Executor(communicator, verified=False), communicator.rank)

    return run_ranks(world, uid, run, timeout_ms=timeout_ms)


def _single_rank_error(call) -> Exception:
    results = _on_ranks(1, lambda executor, rank: call(executor))
    assert isinstance(results[0], Exception), results[0]
    return results[0]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: (np.zeros(16, np.float64), np.zeros(16, np.float64)), "input has dtype float64"),
        (lambda: (np.zeros(32, np.float32)[::2], np.zeros(16, np.float32)), "input is not contiguous"),
        (lambda: (np.zeros(16, np.float32), np.zeros(8, np.float32)), "output: holds 32 bytes"),
        (lambda: (np.zeros(16, np.float32), np.zeros(16, np.int32)), "output: dtype int32 differs"),
    ],
)
def test_bad_buffers_name_the_argument(make, message):
    plan = _plan()

    def call(executor):
        source, target = make()
        executor.execute(plan, source, target)

    error = _single_rank_error(call)
    assert isinstance(error, InvalidArgumentError)
    assert message in str(error)


def test_world_size_size_range_and_operator_are_checked():
    two = _plan()
    errors = _on_ranks(
        1, lambda executor, rank: executor.execute(two, np.zeros(4, np.float32), np.zeros(4, np.float32))
    )
    assert "is for 2 ranks, the communicator has 1" in str(errors[0])

    small = _plan(max_message_size=1024)

    def body(executor, rank):
        found = []
        for args in (
            (np.zeros(512, np.float32), np.zeros(512, np.float32), "sum"),  # 2048 B > 1024
            (np.zeros(16, np.float32), np.zeros(16, np.float32), "max"),  # the plan sums
            (np.zeros(16, np.float32), np.zeros(16, np.float32), "prod"),
        ):
            with pytest.raises(InvalidArgumentError) as raised:
                executor.execute(small, args[0], args[1], op=args[2])
            found.append(str(raised.value))
        return found

    results = _on_ranks(2, body)
    messages = results[0]
    assert "message bytes: 2048 is outside the range of plan" in messages[0]
    assert "reduces with 'sum', the call asks for 'max'" in messages[1]
    assert "op: expected one of sum, min, max" in messages[2]


def test_in_place_plan_wants_one_buffer():
    plan = _plan(inplace=True)

    def body(executor, rank):
        with pytest.raises(InvalidArgumentError, match="runs in place, so the input must be the output"):
            executor.execute(plan, np.zeros(16, np.float32), np.zeros(16, np.float32))
        buffer = np.arange(16, dtype=np.float32)
        executor.execute(plan, buffer, buffer)
        return buffer

    results = _on_ranks(2, body)
    for rank in range(2):
        assert np.array_equal(results[rank], 2 * np.arange(16, dtype=np.float32))


def test_a_peer_that_never_calls_times_out_with_a_diagnostic(monkeypatch):
    monkeypatch.setenv("LOOM_DEVICE_TIMEOUT_MS", "500")
    plan = _plan()
    done = threading.Event()

    def body(executor, rank):
        data = np.ones(64, np.float32)
        executor.execute(plan, data, np.zeros(64, np.float32))  # both ranks: set up and one call
        if rank == 1:
            done.wait(30)  # stays alive but skips the second call
            return "absent"
        try:
            executor.execute(plan, data, np.zeros(64, np.float32))
        finally:
            done.set()

    results = _on_ranks(2, body)
    error = results[0]
    assert isinstance(error, LoomTimeoutError), error
    text = str(error)
    assert "rank 0, thread block" in text and "op " in text and "timed out after 500 ms" in text, text


def test_second_call_with_same_buffers_builds_nothing():
    plan = _plan(name="allreduce_rs_ag", min_message_size=0)

    def body(executor, rank):
        source, target = np.ones(1024, np.float32), np.zeros(1024, np.float32)
        for _ in range(5):
            executor.execute(plan, source, target)
        return executor.stats(), target

    results = _on_ranks(2, body)
    stats, target = results[0]
    assert stats == {
        "plans_built": 1,
        "contexts_built": 1,
        "launches": 5,
        "specialized_transfers": 0,  # its signals and waits keep rs_ag off the fast path (inline programs)
        "generic_transfers": stats["generic_transfers"],
        "inlined_contexts": 0,
        "proxy_memories": 0,  # no port channels
        "proxy_sharers": 1,  # no split shares it
        "freed_buffer_contexts_dropped": 0,
        "buffer_exchanges": 5,  # rs_ag writes into the peers' buffers: every eager call says where its are
        "window_calls": 0,  # no symmetric windows
        "grouped_calls": 0,  # no send/recv group of several peers
    }
    assert stats["generic_transfers"] > 0
    assert np.array_equal(target, np.full(1024, 2, np.float32))


def test_ranks_changing_buffers_at_different_calls_never_reuse_a_context_built_for_other_peer_buffers():
    """Contexts are keyed by every rank's buffers. Keyed by a rank's own buffers alone, the calls below
    left rank 0 with a context for (X1, Y2) and rank 1 with one for (Y1, X2); at the fourth call both
    found their own buffers cached and wrote into the peer's old buffers."""
    plan = _plan(name="allreduce_rs_ag", min_message_size=0)
    count = 1024
    # Which of two buffers each rank passes at each call.
    choices = {0: [0, 0, 1, 0, 1, 0], 1: [0, 1, 0, 0, 1, 1]}

    def body(executor, rank):
        sources = [np.empty(count, np.float32) for _ in range(2)]
        targets = [np.empty(count, np.float32) for _ in range(2)]
        outputs = []
        for call, choice in enumerate(choices[rank]):
            sources[choice][:] = np.arange(count, dtype=np.float32) * (call + 1) + rank
            targets[choice][:] = -1
            executor.execute(plan, sources[choice], targets[choice])
            outputs.append(targets[choice].copy())
        return outputs

    results = _on_ranks(2, body)
    for rank in range(2):
        for call, output in enumerate(results[rank]):
            expected = 2 * np.arange(count, dtype=np.float32) * (call + 1) + 1
            assert np.array_equal(output, expected), f"rank {rank}, call {call}: {output[:4]} != {expected[:4]}"


def test_the_plan_cache_evicts_the_least_recently_used_plan_beyond_32():
    plans = [_plan(plan_name=f"cached_{index}") for index in range(34)]

    def body(executor, rank):
        source, target = np.ones(256, np.float32), np.zeros(256, np.float32)
        built = []
        for plan in [*plans, plans[-1], plans[0]]:  # the last is cached, the first was evicted
            executor.execute(plan, source, target)
            built.append(executor.stats()["plans_built"])
        return built, target

    results = _on_ranks(2, body)
    for rank in range(2):
        built, target = results[rank]
        assert built[33:] == [34, 34, 35], built
        assert np.array_equal(target, np.full(256, 2, np.float32))
