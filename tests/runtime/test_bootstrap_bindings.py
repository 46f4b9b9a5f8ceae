"""loom._native.UniqueId and Bootstrap from Python: ranks on threads (so the GIL must be released
in every blocking call), error classes, and launch_environment()."""

from __future__ import annotations

import os
import pickle
import random
import signal
import socket
import threading
import time

import loom
import pytest

_native = pytest.importorskip("loom._native", reason="loom._native is not built ('bash scripts/setup.sh')")

from rank_threads import run_ranks as _run_ranks  # noqa: E402 (needs the native module checked first)


def test_unique_id_round_trips() -> None:
    uid = _native.UniqueId.create("127.0.0.1")
    assert uid.address == f"127.0.0.1:{uid.port}"
    data = uid.to_bytes()
    assert len(data) == _native.UniqueId.SIZE == 40
    assert _native.UniqueId.from_bytes(data) == uid
    assert _native.UniqueId.from_bytes(bytearray(data)) == uid
    assert _native.UniqueId.from_hex(uid.hex()) == uid
    assert pickle.loads(pickle.dumps(uid)) == uid
    assert hash(_native.UniqueId.from_hex(uid.hex())) == hash(uid)
    assert uid != _native.UniqueId.create("127.0.0.1")
    assert uid.hex()[-32:] not in repr(uid)  # the secret stays out of logs
    fixed = _native.UniqueId.from_address("127.0.0.1:29501", "ab" * 16)
    assert fixed.hex().endswith("ab" * 16)


def test_unique_id_errors() -> None:
    with pytest.raises(loom.InvalidArgumentError, match="39 bytes, expected 40"):
        _native.UniqueId.from_bytes(b"x" * 39)
    with pytest.raises(loom.InvalidArgumentError, match="wrong magic"):
        _native.UniqueId.from_bytes(b"x" * 40)
    with pytest.raises(loom.InvalidArgumentError, match="expected 80 hex digits"):
        _native.UniqueId.from_hex("00")
    with pytest.raises(loom.InvalidArgumentError, match="secret: expected 32 hex digits"):
        _native.UniqueId.from_address("127.0.0.1:1", "abc")
    with pytest.raises(TypeError, match="expected a bytes-like object, got str"):
        _native.UniqueId.from_bytes("text")


def test_all_gather_send_recv_barrier() -> None:
    world = 4
    rng = random.Random(7)
    payloads = [rng.randbytes(rng.choice([0, 1, 100, 70000])) for _ in range(world)]
    uid = _native.UniqueId.create("127.0.0.1")

    def body(bootstrap):
        rank = bootstrap.rank
        assert bootstrap.world_size == world
        gathered = bootstrap.all_gather(memoryview(payloads[rank]))
        for peer in range(world):
            bootstrap.send(peer, 2**64 - 1, b"max tag from %d" % rank)
            bootstrap.send(peer, 0, bytearray(b"zero tag from %d" % rank))
        received = {peer: (bootstrap.recv(peer, 0), bootstrap.recv(peer, 2**64 - 1)) for peer in range(world)}
        bootstrap.barrier()
        return gathered, received, bootstrap.peer_address(rank)

    results = _run_ranks(world, uid, body)
    for rank in range(world):
        gathered, received, address = results[rank]
        assert gathered == payloads
        assert all(isinstance(block, bytes) for block in gathered)
        for peer in range(world):
            assert received[peer] == (b"zero tag from %d" % peer, b"max tag from %d" % peer)
        assert address.startswith("127.0.0.1:")


def test_gil_is_released_while_waiting() -> None:
    uid = _native.UniqueId.create("127.0.0.1")
    ticks = []

    def body(bootstrap):
        if bootstrap.rank == 0:
            return bootstrap.recv(1, 0)  # waits about 0.3 s for rank 1
        start = time.monotonic()
        while time.monotonic() - start < 0.3:  # Python work that needs the GIL meanwhile
            ticks.append(1)
            time.sleep(0.001)
        bootstrap.send(0, 0, b"done")
        return None

    results = _run_ranks(2, uid, body)
    assert results[0] == b"done"
    assert len(ticks) > 50


def test_missing_rank_raises_loom_timeout_error_naming_it() -> None:
    uid = _native.UniqueId.create("127.0.0.1")
    start = time.monotonic()
    results = _run_ranks(3, uid, lambda b: None, ranks=[0, 1], timeout_ms=800)
    assert time.monotonic() - start < 5
    error = results[0]
    assert isinstance(error, loom.LoomTimeoutError) and isinstance(error, TimeoutError)
    assert "rank 2 did not arrive within 800 ms (2 of 3 ranks joined)" in str(error)
    assert isinstance(results[1], loom.LoomTimeoutError)


def test_argument_errors_and_closed_bootstrap() -> None:
    uid = _native.UniqueId.create("127.0.0.1")
    with pytest.raises(loom.InvalidArgumentError, match="rank 2 is not in 0..1"):
        _native.Bootstrap(2, 2, uid)
    with pytest.raises(loom.InvalidArgumentError, match="timeout: expected 1 to"):
        _native.Bootstrap(0, 1, uid, timeout_ms=0)
    bootstrap = _native.Bootstrap(0, 1, uid, timeout_ms=1000)
    with pytest.raises(TypeError, match="expected a bytes-like object"):
        bootstrap.send(0, 0, "text")
    with pytest.raises(loom.InvalidArgumentError, match="peer 1 is not in 0..0"):
        bootstrap.recv(1, 0)
    assert repr(bootstrap) == "Bootstrap(rank=0, world_size=1)"
    bootstrap.close()
    assert bootstrap.closed and repr(bootstrap) == "Bootstrap(closed)"
    with pytest.raises(loom.InvalidArgumentError, match="the bootstrap is closed"):
        bootstrap.barrier()


def test_timeout_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOM_BOOTSTRAP_TIMEOUT_MS", "1234")
    with _native.Bootstrap(0, 1, _native.UniqueId.create("127.0.0.1")) as bootstrap:
        assert bootstrap.timeout_ms == 1234
    monkeypatch.setenv("LOOM_BOOTSTRAP_TIMEOUT_MS", "-5")
    with pytest.raises(loom.InvalidArgumentError, match="LOOM_BOOTSTRAP_TIMEOUT_MS"):
        _native.Bootstrap(0, 1, _native.UniqueId.create("127.0.0.1"))
    monkeypatch.delenv("LOOM_BOOTSTRAP_TIMEOUT_MS")
    with _native.Bootstrap(0, 1, _native.UniqueId.create("127.0.0.1")) as bootstrap:
        assert bootstrap.timeout_ms == _native.DEFAULT_BOOTSTRAP_TIMEOUT_MS == 30000


def test_launch_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOOM_LAUNCHER", "LOOM_BOOTSTRAP_ADDR"]
    for name in [*names, "LOOM_BOOTSTRAP_REQUIRE_SECRET", "LOOM_BOOTSTRAP_LISTEN_FD"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.delenv("LOOM_BOOTSTRAP_SECRET", raising=False)
    env = _native.launch_environment()
    assert env["launcher"] == "Open MPI"
    assert (env["rank"], env["world_size"]) == (1, 2)
    assert env["address"] == "127.0.0.1:29501"
    assert env["address_source"] == "MASTER_ADDR/MASTER_PORT"
    assert env["secret_from_environment"] is False
    monkeypatch.setenv("LOOM_BOOTSTRAP_SECRET", "cd" * 16)
    env = _native.launch_environment()
    assert env["secret_from_environment"] is True
    assert env["unique_id"].hex().endswith("cd" * 16)
    monkeypatch.setenv("LOOM_BOOTSTRAP_SECRET", "nothex")
    with pytest.raises(loom.InvalidArgumentError, match="LOOM_BOOTSTRAP_SECRET"):
        _native.launch_environment()


def test_from_environment_without_secret_derives_one_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:  # a free port for Loom, so MASTER_PORT is the one below it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name in ("LOOM_BOOTSTRAP_ADDR", "LOOM_BOOTSTRAP_SECRET", "LOOM_LAUNCHER", "LOOM_BOOTSTRAP_LISTEN_FD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("LOOM_BOOTSTRAP_REQUIRE_SECRET", raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port - 1))
    for _ in range(2):
        with _native.Bootstrap.from_environment(timeout_ms=2000) as bootstrap:
            assert bootstrap.all_gather(b"solo") == [b"solo"]
            assert bootstrap.peer_address(0) == f"127.0.0.1:{port}"
    warnings = [line for line in capfd.readouterr().err.splitlines() if "LOOM_BOOTSTRAP_SECRET is not set" in line]
    assert len(warnings) == 1
    assert "derived from the torchrun job's identity" in warnings[0]
    monkeypatch.setenv("LOOM_BOOTSTRAP_REQUIRE_SECRET", "1")
    with pytest.raises(loom.InvalidArgumentError, match="LOOM_BOOTSTRAP_REQUIRE_SECRET is on"):
        _native.Bootstrap.from_environment()


@pytest.fixture
def sigint_raises_keyboard_interrupt():
    """Python's own SIGINT handler, whatever the test run inherited: a shell starts a background job with
    SIGINT ignored, and Python then installs no handler, so no KeyboardInterrupt would come."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_interrupts_a_waiting_call(sigint_raises_keyboard_interrupt) -> None:
    uid = _native.UniqueId.create("127.0.0.1")
    release = threading.Event()

    def idle_peer() -> None:
        with _native.Bootstrap(1, 2, uid, timeout_ms=20000):
            release.wait(30)

    peer = threading.Thread(target=idle_peer)
    peer.start()
    try:
        with _native.Bootstrap(0, 2, uid, timeout_ms=20000) as bootstrap:
            timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
            timer.start()
            start = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                bootstrap.recv(1, 0)  # rank 1 never sends
            assert time.monotonic() - start < 3
            # An interrupted collective leaves the object unusable for collectives.
            timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                bootstrap.barrier()
            with pytest.raises(loom.LoomSystemError, match="unusable after an earlier failure: a collective was"):
                bootstrap.barrier()
    finally:
        release.set()
        peer.join(30)
