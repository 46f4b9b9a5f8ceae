"""What a user or a damaged environment can do wrong, and what Loom must do then (issue 53): Python
callbacks that are lambdas, raise, or change from another thread; read-only and impossibly large buffers; a
cache the JIT cannot write; a compile that fails on rank 0; ranks that pass different roots. CPU backend,
ranks on host threads (one process) or in a child process where the interpreter's exit is the point."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

_native = pytest.importorskip("loom._native", reason="the native module is not built")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import loom  # noqa: E402
import loom.runtime.communicator as communicator_module  # noqa: E402
from loom.errors import InvalidArgumentError, LoomError  # noqa: E402
from rank_threads import run_local_ranks, run_ranks  # noqa: E402

RANK_THREADS = str(Path(__file__).resolve().parents[1] / "runtime")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "cache"))
    loom.registry.set_selector(None)
    yield tmp_path / "cache"
    loom.registry.set_selector(None)
    _native.registry_clear("user")


def _run_python(program: str, tmp_path: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "LOOM_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": RANK_THREADS}
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=environment, check=False
    )


@pytest.mark.parametrize(
    "selector",
    ["lambda request: None", "lambda request: request.candidates[0] if request.candidates else None"],
    ids=["none", "first"],
)
def test_a_lambda_selector_survives_the_interpreters_exit(selector, tmp_path):
    program = f"""
import loom, numpy as np
from rank_threads import run_local_ranks
loom.set_selector({selector})
def body(bootstrap):
    comm = loom.Communicator(bootstrap, host_only=True)
    data = np.ones(1024, np.float32)
    try:
        comm.all_reduce(data)
    except loom.LoomError:
        return "no plan"
    return float(data[0])
print("results", sorted(map(str, run_local_ranks(3, body).values())))
"""
    done = _run_python(program, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Fatal Python error" not in done.stderr
    assert "results ['3.0', '3.0', '3.0']" in done.stdout or "results ['no plan'" in done.stdout, done.stdout


def test_a_selector_that_raises_raises_at_the_call_and_the_next_selector_works(cache):
    def broken(request):
        raise RuntimeError("the selector's own bug")

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        data = np.ones(1024, np.float32)
        with pytest.raises(RuntimeError, match="the selector's own bug"):
            comm.all_reduce(data)
        return True

    loom.registry.set_selector(broken)
    assert all(run_local_ranks(2, body).values())
    loom.registry.set_selector(None)

    def again(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        data = np.ones(1024, np.float32)
        comm.all_reduce(data)
        return float(data[0])

    assert set(run_local_ranks(2, again).values()) == {2.0}


def test_selectors_set_from_another_thread_while_ranks_call(cache):
    stop = threading.Event()

    def flip():
        choices = [None, lambda request: request.candidates[0] if request.candidates else None]
        index = 0
        while not stop.is_set():
            loom.registry.set_selector(choices[index % 2])
            index += 1
            time.sleep(0.0005)

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        for size in (256, 1024, 4096) * 20:
            data = np.ones(size, np.float32)
            comm.all_reduce(data)
            assert data[0] == 2.0
        return True

    try:
        assert all(run_local_ranks(2, body).values())
    finally:
        stop.set()
        flipper.join(10)


def test_read_only_outputs_are_refused_naming_the_argument(cache):
    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        frozen = np.frombuffer(bytes(4096), np.float32)  # immutable bytes underneath
        messages = []
        with pytest.raises(InvalidArgumentError) as in_place:
            comm.all_reduce(frozen)
        messages.append(str(in_place.value))
        output = np.zeros(2048, np.float32)
        output.flags.writeable = False
        with pytest.raises(InvalidArgumentError) as gathered:
            comm.all_gather(output, np.ones(1024, np.float32))
        messages.append(str(gathered.value))
        assert bytes(frozen.tobytes()) == bytes(4096)  # unchanged
        return messages

    for tensor, output in run_local_ranks(2, body).values():
        assert tensor.startswith("tensor: is read-only"), tensor
        assert output.startswith("output: is read-only"), output


class _HugeArray:
    """An array interface that claims more memory than 64-bit sizes address."""

    def __init__(self, elements: int):
        self.__array_interface__ = {"shape": (elements,), "typestr": "<f4", "data": (4096, False), "version": 3}


def test_a_size_past_64_bits_is_an_error_naming_the_argument():
    from loom.runtime.tensors import buffer_view

    with pytest.raises(InvalidArgumentError, match=r"^output: 18446744073709551616 bytes at 0x1000 is past what"):
        buffer_view(_HugeArray(1 << 62), "output")
    with pytest.raises(InvalidArgumentError, match=r"^input: .* past what Loom addresses"):
        buffer_view(_HugeArray((1 << 61) + 1), "input")


def test_an_unwritable_cache_keeps_jit_plans_in_memory(tmp_path, monkeypatch, capfd):
    # A cache root under a regular file cannot be made, whoever runs the test (root ignores permission bits).
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LOOM_CACHE_DIR", str(blocker / "cache"))

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)  # 5 ranks: no bundled plan, the JIT compiles
        data = np.full(4096, comm.rank, np.float32)
        comm.all_reduce(data)
        data2 = np.full(4096, 1.0, np.float32)
        comm.all_reduce(data2)
        return float(data[0]), float(data2[0])

    assert set(run_local_ranks(5, body).values()) == {(10.0, 5.0)}
    warnings = capfd.readouterr().err
    assert warnings.count("the JIT keeps its plans in memory") == 1, warnings


def test_a_failure_on_rank_zero_during_the_jit_reaches_every_rank_at_once(cache, monkeypatch):
    def failing(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/the/cache/jit")

    monkeypatch.setattr(communicator_module, "plan_for_call", failing)

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        started = time.monotonic()
        try:
            comm.all_reduce(np.ones(4096, np.float32))
        except LoomError as error:
            return time.monotonic() - started, str(error)
        return 0.0, "ran"

    for seconds, text in run_local_ranks(5, body).values():
        assert seconds < 5.0, (seconds, text)
        assert "rank 0 could not compile a plan for this call" in text, text
        assert "PermissionError" in text and "/the/cache/jit" in text, text


def test_ranks_that_pass_different_roots_are_told_so(cache):
    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        try:
            comm.broadcast(np.ones(4096, np.float32), root=comm.rank)  # every rank names itself: 3 roots
        except LoomError as error:
            return str(error)
        return "ran"

    results = run_ranks(3, None, body, timeout_ms=10000)
    for rank, text in results.items():
        text = str(text)
        assert "UnicodeDecodeError" not in text, (rank, text)
        assert "disagree" in text, (rank, text)


def test_a_send_and_recv_of_different_sizes_fail_on_both_ranks_at_once_saying_both_sizes(cache, monkeypatch):
    # The sender sees both entries and stops; it announces why over the bootstrap, so the receiver's waits
    # end at once with the sender's words, not at their 20 s timeout nor as "rank 0 left".
    monkeypatch.setenv("LOOM_DEVICE_TIMEOUT_MS", "20000")

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        started = time.monotonic()
        try:
            if comm.rank == 0:
                comm.send(np.ones(100, np.float32), 1)
            else:
                comm.recv(np.zeros(200, np.float32), 0)
        except LoomError as error:
            return time.monotonic() - started, str(error)
        return 0.0, "ran"

    results = run_local_ranks(2, body)
    both = "a send of 400 bytes meets a receive entry of 800 bytes posted by rank 1"
    for rank, (seconds, text) in results.items():
        assert seconds < 3.0, (rank, seconds, text)
        assert both in text, (rank, text)
    assert "rank 0's call failed" in results[1][1], results[1][1]
