"""Descriptor passing under attack (issue 53): a local process that is no rank of the job posts forged notes
with its own memfds, and junk, into the job's sockets while the job runs collectives (CPU backend, ranks
as processes, host memory shared through memfds), as the job's user and as another user (`runuser -u
nobody`, skipped where the machine refuses it). Nothing it posts is taken, every result stays right, no job
data reaches its memory, and over 1,000 communicator cycles under that noise no rank gains a descriptor.
The rules themselves (keys, pids, users, the sender's check of the listener): fd_passing_test.cc."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("loom._native", reason="the native module is not built")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "executor"))
from multiprocess_jobs import launch, results  # noqa: E402

INTRUDER = HERE / "descriptor_intruder.py"
JOB_ENV = {"LOOM_BOOTSTRAP_TIMEOUT_MS": "20000", "LOOM_DEVICE_TIMEOUT_MS": "20000"}


def _nobody_can_run_python() -> str | None:
    """Why the intruder cannot run as another user here, or None when it can."""
    if shutil.which("runuser") is None:
        return "runuser is not installed"
    try:
        done = subprocess.run(
            ["runuser", "-u", "nobody", "--", "python3", "-c", "pass"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"runuser failed: {error}"
    return None if done.returncode == 0 else f"runuser -u nobody is refused here: {done.stderr.strip()[:200]}"


def _start_intruder(as_nobody: bool) -> subprocess.Popen:
    # The program's text on the command line, so that another user needs no access to this checkout.
    program = ["-c", INTRUDER.read_text()]
    command = ["runuser", "-u", "nobody", "--", "python3", *program] if as_nobody else [sys.executable, *program]
    intruder = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(0.3)
    return intruder


def _stop(intruder: subprocess.Popen) -> dict:
    out, err = intruder.communicate(timeout=30)  # closes its standard input: it stops and reports
    assert intruder.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("as_nobody", [False, True], ids=["same_user", "nobody"])
def test_forged_notes_are_refused_and_results_stay_right(as_nobody):
    if as_nobody and (why := _nobody_can_run_python()):
        pytest.skip(why)
    intruder = _start_intruder(as_nobody)
    try:
        run = launch(4, "collectives", env=JOB_ENV, limit_s=120)
    finally:
        seen = _stop(intruder)
    print(f"intruder (uid {seen['uid']}): {seen}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert sorted(results(run.stdout)) == [0, 1, 2, 3]  # every rank checked its results against NumPy
    assert seen["sockets_seen"] >= 4 and seen["posted"] > 0, seen  # it found the job and got notes in
    assert not seen["altered"], seen  # no job data in the intruder's memory
    if as_nobody:
        assert seen["uid"] == 65534, seen
    words = "a connection of user 65534" if as_nobody else "refused a memory-descriptor note from process"
    assert words in run.stderr, run.stderr[-3000:]


def test_junk_notes_over_1000_cycles_leave_no_descriptor_behind():
    intruder = _start_intruder(as_nobody=False)
    try:
        run = launch(2, "cycles", "1000", env=JOB_ENV, limit_s=400)
    finally:
        seen = _stop(intruder)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert seen["posted"] > 0 and not seen["altered"], seen
    for rank, (record,) in sorted(results(run.stdout).items()):
        assert record["cycles"] == 1000
        assert record["growth"]["fds"] <= 0, (rank, record)
        assert record["after"]["shm_open"] <= 1, (rank, record)
