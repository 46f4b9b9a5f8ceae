"""`loom verify PLAN...` and the verification step of `loom compile`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_verify_api import RACY

ROOT = Path(__file__).resolve().parents[3]
GOOD = Path(__file__).with_name("data")
BROKEN = ROOT / "tests" / "data" / "plans" / "broken"


def _loom(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loom", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_correct_plans_print_ok_and_exit_0():
    json_plan = ROOT / "examples" / "plans" / "allreduce_2r_ll.json"
    result = _loom("verify", str(GOOD / "allreduce_2r.txt"), str(json_plan))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"ok      {GOOD / 'allreduce_2r.txt'} (allreduce, 2 ranks, simple; 3 calls, and every later one)",
        f"ok      {json_plan} (allreduce, 2 ranks, ll; 3 calls, and every later one)",
    ]
    assert _loom("verify", "-q", str(GOOD / "allreduce_2r.txt")).stdout == ""


def test_findings_exit_1_with_rank_tb_op_and_the_op_text():
    path = BROKEN / "write_write_race_two_tbs.txt"
    result = _loom("verify", str(GOOD / "allreduce_2r.txt"), str(path))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[1:] == [
        f"FAILED  {path}: 1 finding: 1 race",
        "  rank 0 tb 0 op 5: race: writes rank 0 output[0] unordered with the write by rank 0 tb 1 op 0"
        " (copy input[0] -> output[0]), and no signal/wait, barrier, semaphore or packet orders the two",
        "      reduce sum input[0], scratch[0] -> output[0]",
    ]


def test_calls_option():
    path = ROOT / "tests" / "compiler" / "verify" / "data" / "allgather_4r_no_handshake.json"
    assert "3 calls" in _loom("verify", str(GOOD / "allreduce_2r.txt")).stdout
    assert "1 calls" in _loom("verify", "--calls", "1", str(GOOD / "allreduce_2r.txt")).stdout
    for calls in (["--calls", "1"], []):  # the inductive step runs the later calls whatever --calls says
        result = _loom("verify", *calls, str(path))
        assert result.returncode == 1 and "the user's read of the result" in result.stdout


def test_a_plan_that_does_not_load_is_invalid(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("plan x\n")
    result = _loom("verify", str(path))
    assert result.returncode == 1
    assert result.stderr.startswith(f"INVALID {path}: line ")


def test_compile_exits_1_with_the_findings_unless_no_verify(tmp_path):
    (tmp_path / "racy.py").write_text(RACY)
    result = _loom("compile", "racy.py", "--world-size", "3", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "loom compile: plan racy_sendrecv fails verification, 5 findings: 3 race, 2 postcondition"
    assert lines[1].startswith("rank 0 tb 0 op 2: race: writes rank 1 output[0] unordered with the user's read")
    assert lines[2] == "    put input[0] -> ch0:output[0]  @ racy.py:12"
    assert lines[-1] == "loom compile: --no-verify writes the plan anyway"
    result = _loom("compile", "racy.py", "--world-size", "3", "--no-verify", cwd=tmp_path)
    assert result.returncode == 0 and '"name": "racy_sendrecv"' in result.stdout
