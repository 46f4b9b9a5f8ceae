"""Faults on the multi-process CPU backend, with real processes (docs/testing.md):

- a rank killed with SIGKILL inside a collective: every survivor raises, naming the dead rank, within the
  configured timeout plus 1 s; the launcher exits non-zero naming it;
- Communicator.abort(): bounded with a call in flight and with a dead peer, frees what it held; a
  communicator whose call failed refuses further calls;
- recovery: survivors of a killed rank abort, build a communicator among themselves and get correct
  results, 100 times over, without growth in descriptors, threads, shared memory or RSS;
- ranks that disagree on the collective, size, dtype or plan: an error on every rank, no hang;
- 1,000 create/call/destroy cycles: growth of descriptors, shared-memory segments, threads, RSS;
- garbage and half-open connections flooding the bootstrap root while a job starts: the job completes.

Every test has a pytest timeout and every process a subprocess timeout.
"""

from __future__ import annotations

import os
import random
import re
import secrets
import socket
import threading
import time

import pytest
from multiprocess_jobs import finish, free_port, launch, results, start_ranks

TIMEOUT_MS = 2000
FAST = {"LOOM_DEVICE_TIMEOUT_MS": str(TIMEOUT_MS), "LOOM_BOOTSTRAP_TIMEOUT_MS": str(TIMEOUT_MS)}
CYCLES = int(os.environ.get("LOOM_FAULT_CYCLES", "1000"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("nproc", "victim", "where"), [(2, 1, "packets"), (4, 2, "packets"), (2, 1, "semaphores"), (4, 1, "exchange")]
)
def test_a_rank_killed_mid_collective_makes_every_survivor_fail_in_time(nproc, victim, where):
    codes, text = finish(start_ranks(nproc, "kill", str(victim), where, env=FAST), limit_s=30)
    found = results(text)
    killed_at = found[victim][0]["killed_at"]
    assert codes[victim] == -9, text[-3000:]
    for rank in range(nproc):
        if rank == victim:
            continue
        failure, refused, aborted = found[rank]
        assert failure["kind"] in ("LoomTimeoutError", "TransportError"), failure
        assert re.search(rf"ranks? [\d, ]*\b{victim}\b[\d, ]* closed", failure["message"]), failure
        # The bootstrap connection closes with the process. Waits on the dead rank (semaphore waits on its
        # channel, the host board) end when that is seen, within 1 s of the kill, well before the 2 s
        # timeouts; so do LL packet reads, which do not know which peer writes them: any departed rank of the
        # communicator ends them.
        bound = 1.0
        assert failure["failed_at"] - killed_at <= bound, (failure, killed_at)
        # comm.error(), asked by a watchdog thread while the call runs: the departure (on two ranks the survivor
        # talked to the victim, so it sees it) or the call's failure, whichever comes first.
        assert failure["watched_at"] is not None, failure
        watch_bound = 1.0
        assert failure["watched_at"] - killed_at <= watch_bound, (failure, killed_at)
        assert re.search(rf"\b{victim}\b", failure["watched"]), failure
        assert "must be aborted" in refused["next_call"], refused
        assert aborted["abort_ended"] and aborted["abort_s"] < 1.0, aborted
        assert codes[rank] == 3, text[-3000:]  # the worker's own exit after reporting


@pytest.mark.timeout(60)
def test_a_peer_alive_but_silent_ends_the_call_at_the_device_timeout():
    codes, text = finish(start_ranks(2, "silent", env=FAST), limit_s=40)
    assert codes == [0, 0], text[-4000:]
    records = results(text)[0]
    assert [record["elements"] for record in records] == [1024, 1 << 19], records
    for record in records:
        # The host cannot tell a hung peer from a slow one: the timeout is the bound, and the error says so,
        # naming the wait (the LL call's packet read) or the rank that did not come (the large call meets the
        # others on the host board first).
        assert record["error"].startswith("LoomTimeoutError"), record
        assert "timed out after 2000 ms" in record["error"] or "rank 1 did not post" in record["error"], record
        assert TIMEOUT_MS / 1000 <= record["seconds"] <= TIMEOUT_MS / 1000 + 1.0, record


@pytest.mark.timeout(60)
def test_a_stopped_rank_on_a_packet_plan_is_named_as_the_writer_of_the_packet_that_did_not_come():
    # Four ranks, rank 2 stopped (SIGSTOP: its process and connections alive) before an LL all-reduce. A
    # packet read knows only an address in its scratch; the error names the peer whose put writes there.
    victim = 2
    processes = start_ranks(4, "stopped", str(victim), env=FAST)
    others = [process for rank, process in enumerate(processes) if rank != victim]
    try:
        codes, text = finish(others, limit_s=30)
    finally:
        processes[victim].kill()
        processes[victim].communicate()
    assert codes == [0, 0, 0], text[-4000:]
    for _rank, (record,) in sorted(results(text).items()):
        # Its own read timed out, or a peer's did first and announced its failure (whose text it passes on).
        assert record["error"].startswith(("LoomTimeoutError", "TransportError")), record
        assert f"the packet it waited for is rank {victim}'s to write" in record["error"], record
        assert f"rank {victim} did not write it in time" in record["error"], record
        assert record["seconds"] <= TIMEOUT_MS / 1000 + 1.0, record


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["packets", "exchange"])
def test_a_rank_that_aborts_is_named_as_having_aborted_not_as_gone(where):
    # Rank 2 of 3 aborts its communicator while the others wait for it inside a call. Its abort is announced
    # to the peers, so they fail within a second naming the abort, not a process that exited or was killed.
    aborter = 2
    codes, text = finish(start_ranks(3, "announced_abort", str(aborter), where, env=FAST), limit_s=40)
    assert codes == [0, 0, 0], text[-4000:]
    found = results(text)
    (abort,) = found[aborter]
    for rank in (0, 1):
        (record,) = found[rank]
        assert f"rank {aborter} aborted its communicator" in record["message"] or (
            f"{aborter} announced an abort" in record["message"]
        ), record
        assert "exited or killed" not in record["message"], record
        assert record["failed_at"] - abort["aborted_at"] < 1.0, (record, abort)
        assert record["watched"] and "abort" in record["watched"], record


@pytest.mark.timeout(400)
def test_survivors_of_a_killed_rank_recover_in_the_same_process_without_leaking(tmp_path):
    cycles = int(os.environ.get("LOOM_RECOVERY_CYCLES", "100"))
    env = {**FAST, "LOOM_TEST_SCRATCH": str(tmp_path)}
    codes, text = finish(start_ranks(2, "recover", str(cycles), env=env), limit_s=360)
    assert codes == [0, 0], text[-4000:]
    for rank, (record,) in sorted(results(text).items()):
        median, worst = record["detection_median_s"], record["detection_max_s"]
        print(f"rank {rank}: detection median {median:.3f} s, max {worst:.3f} s; growth {record['growth']}")
        assert record["checked"] == cycles + 3, record  # every recovered all-reduce equalled NumPy's
        # Detection within 1 s of the kill, in packet reads and semaphore waits alike, each error naming rank 2.
        assert record["detection_max_s"] <= 1.0, record
        assert record["named_victim"] == cycles + 3, record
        growth = record["growth"]
        assert growth["fds"] <= 2 and growth["threads"] <= 1, record
        assert growth["shm_open"] <= 0 and growth["shm_mapped"] <= 0, record
        # Python's allocator keeps some pages; a leak per cycle (a plan, a scratch) would be megabytes.
        assert growth["rss_kib"] < 64 * 1024, record


@pytest.mark.timeout(60)
def test_the_launcher_names_the_killed_rank():
    run = launch(4, "kill", "1", env=FAST, limit_s=40)
    assert run.returncode != 0
    assert "rank 1" in run.stderr and "(the first rank to fail)" in run.stderr, run.stderr[-3000:]
    assert "SIGKILL" in run.stderr or "signal 9" in run.stderr, run.stderr[-3000:]


@pytest.mark.timeout(60)
def test_abort_is_bounded_frees_everything_and_a_failed_communicator_refuses_calls():
    codes, text = finish(start_ranks(2, "abort", env=FAST), limit_s=40)
    assert codes[0] == 0, text[-4000:]
    record = results(text)[0][0]
    # A call in flight on another thread ends, and abort returns, well within its 3 s wait.
    assert record["in_flight_ended"] and record["in_flight_abort_s"] < 1.0, record
    assert "aborted" in record["in_flight_error"], record
    before, after = record["before"], record["after"]
    assert after["fds"] <= before["fds"] and after["threads"] <= before["threads"], record
    assert after["shm_open"] == before["shm_open"] == 0 and after["shm_mapped"] == 0, record
    # Rank 1's process is gone (an exit that skipped the goodbye): the call ends on that, naming it.
    assert "TransportError" in record["failed_call"] and "rank 1's process is gone" in record["failed_call"], record
    assert "must be aborted" in record["refused"], record
    assert record["dead_peer_abort_s"] < 1.0, record


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["collective", "size", "dtype", "plan", "large-size"])
def test_ranks_that_disagree_all_fail_without_hanging(kind):
    run = launch(2, "disagree", kind, env=FAST, limit_s=30)
    found = results(run.stdout)
    assert sorted(found) == [0, 1], run.stdout[-3000:] + run.stderr[-3000:]
    for rank, (record,) in found.items():
        assert record["error"], (kind, rank, record)
        # A clear error: the disagreement itself, or a timeout naming rank, thread block, op and channel (a
        # rank whose plan was set up launches it) or the rank that has not reached the setup exchange, or,
        # for a rank waiting at that exchange when the rank that timed out has already left, that rank's
        # departure (a loaded machine can order the two that way).
        clear = ("disagree", "different plan", "timed out", "has not reached", "closed its connection", "is gone")
        assert any(text in record["error"] for text in clear), (kind, record)
        assert record["seconds"] < TIMEOUT_MS / 1000 + 2.0, record


@pytest.mark.timeout(230)
def test_create_call_destroy_cycles_leak_nothing():
    run = launch(2, "cycles", str(CYCLES), limit_s=200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for rank, (record,) in sorted(results(run.stdout).items()):
        growth = record["growth"]
        print(
            f"rank {rank}: {record['cycles']} cycles in {record['seconds']:.1f} s; growth: "
            f"fds {growth['fds']}, shm segments open {growth['shm_open']} mapped {growth['shm_mapped']}, "
            f"threads {growth['threads']}, RSS {growth['rss_kib']} KiB"
        )
        assert growth["fds"] <= 0 and growth["threads"] <= 0, record
        assert record["after"]["shm_open"] <= 1 and record["after"]["shm_mapped"] <= 1, record
        assert growth["rss_kib"] < 8 * 1024, record  # allocator noise, not a per-cycle leak


def _flood(port: int, stop: threading.Event, opened: list[socket.socket]) -> None:
    """Half-open connections (nothing sent, or half a header) and garbage, as fast as the root takes them."""
    rng = random.Random(7)
    while not stop.is_set() and len(opened) < 600:
        try:
            connection = socket.create_connection(("127.0.0.1", port), timeout=0.2)
        except OSError:
            time.sleep(0.01)
            continue
        choice = rng.randrange(3)
        try:
            if choice == 1:
                connection.sendall(rng.randbytes(rng.randrange(1, 4096)))
            elif choice == 2:
                connection.sendall(b"LOOM" + rng.randbytes(10))
        except OSError:
            pass
        opened.append(connection)


@pytest.mark.timeout(90)
def test_a_flood_at_the_bootstrap_root_does_not_stop_the_job():
    port = free_port()
    stop, opened = threading.Event(), []
    flooders = [threading.Thread(target=_flood, args=(port, stop, opened), daemon=True) for _ in range(2)]
    job = {"env": {"LOOM_BOOTSTRAP_TIMEOUT_MS": "40000"}, "port": port, "secret": secrets.token_hex(16)}
    processes = start_ranks(4, "flood", ranks=[0], **job)
    for flooder in flooders:
        flooder.start()
    time.sleep(0.5)  # the root is up and flooded before the others join
    processes += start_ranks(4, "flood", ranks=[1, 2, 3], **job)
    try:
        codes, text = finish(processes, limit_s=60)
    finally:
        stop.set()
        for flooder in flooders:
            flooder.join(5)
        for connection in opened:
            connection.close()
    print(f"flood: {len(opened)} connections opened at the root")
    assert len(opened) > 50
    assert codes == [0, 0, 0, 0], text[-3000:]
