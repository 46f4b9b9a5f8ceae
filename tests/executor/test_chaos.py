"""The chaos scheduler (LOOM_CPU_CHAOS=<seed>, issue 54): the CPU backend pauses at random before thread
blocks, ops and the proxy's reads and signals, so that plans run in orders a GPU might take. It is the
verifier's differential test: every bundled plan and library algorithm must stay right under it (one that the
verifier passes and chaos breaks is a verifier bug), and the planted bug (a port put's source overwritten
before its flush) must give wrong sums there while the verifier refuses it.

The seed is read once per process, so each run is a subprocess. LOOM_CHAOS_SEEDS="1 2 3" widens the sweep
(CI runs one seed, within its time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_native = pytest.importorskip("loom._native", reason="the native module is not built")
import loom  # noqa: E402
from loom.verify import verify  # noqa: E402
from loom.verify.report import VerificationError  # noqa: E402

HERE = Path(__file__).resolve().parent
SEEDS = os.environ.get("LOOM_CHAOS_SEEDS", "1").split()


def _run(arguments: list[str], seed: str | None, limit_s: int) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "LOOM_CPU_CHAOS"}
    if seed is not None:
        environment["LOOM_CPU_CHAOS"] = seed
    return subprocess.run(
        [sys.executable, *arguments], env=environment, capture_output=True, text=True, timeout=limit_s, cwd=HERE
    )


@pytest.mark.timeout(60)
def test_a_malformed_seed_is_refused_naming_the_variable():
    script = (
        "import loom\nfrom loom import _native\nfrom loom.runtime.host_ranks import run_ranks\n"
        "r = run_ranks(1, _native.UniqueId.create('127.0.0.1'), lambda b: _native.Communicator(b, host_only=True))\n"
        "print(repr(r[0]))\n"
    )
    run = _run(["-c", script], "seven", 50)
    assert "LOOM_CPU_CHAOS: expected an integer" in run.stdout + run.stderr, run.stdout + run.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEEDS)
def test_the_planted_port_source_race_gives_wrong_sums_under_chaos_and_the_verifier_refuses_it(
    seed, tmp_path, monkeypatch
):
    sys.path.insert(0, str(HERE))
    from chaos_planted import plans

    run = _run(["chaos_planted.py", "30"], seed, 100)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"LOOM_CPU_CHAOS={seed}" in run.stderr, run.stderr[-2000:]
    wrong = json.loads(run.stdout.strip().splitlines()[-1])
    assert wrong["compiled"] == 0, wrong  # proven, and right under chaos
    assert wrong["flush_dropped"] > 0, wrong  # the old verifier's blind spot, seen by chaos
    dropped = plans()["flush_dropped"]
    races = [finding for finding in verify(dropped, calls=3) if finding.category == "race"]
    assert races and "flush the channel first" in str(races[0]), races
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    planted = tmp_path / "flush_dropped.json"
    planted.write_text(json.dumps(dropped))
    with pytest.raises(VerificationError, match="flush the channel first"):
        loom.register_plan(str(planted), name="chaos_flush_dropped")
    assert all(entry.name != "chaos_flush_dropped" for entry in loom.list_plans()), "nothing was registered"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", SEEDS)
def test_every_bundled_plan_and_library_algorithm_stays_right_under_chaos(seed):
    # test_cpu_backend.py runs every library algorithm (every shape, in and out of place, three sizes, three
    # calls) and every bundled plan (under chaos at the small end of its range) against a float64 reference.
    run = _run(["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "test_cpu_backend.py"], seed, 840)
    tail = run.stdout[-4000:] + run.stderr[-2000:]
    assert run.returncode == 0, f"LOOM_CPU_CHAOS={seed}: a plan broke under chaos (a verifier bug)\n{tail}"
    assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1], tail
