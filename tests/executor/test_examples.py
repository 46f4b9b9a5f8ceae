"""The examples in examples/ run as their docstrings say: on the CPU backend here; the PyTorch training
loop needs GPUs and runs in test_executor_gpu.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("loom._native", reason="the native module is not built")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(tmp_path, name: str) -> str:
    env = {**os.environ, "LOOM_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_user_algorithm_compiles_verifies_registers_and_runs(tmp_path):
    lines = _run(tmp_path, "user_algorithm.py").splitlines()
    for rank in range(4):
        assert lines[rank].startswith(f"rank {rank}: all-reduce of 16384 floats, max error "), lines
        assert float(lines[rank].split()[-1]) < 1e-5, lines
    assert lines[-1] == "the selector chose user_allreduce_two_step_4r (registered as user_allreduce_two_step_4r)"
    assert len(list((tmp_path / "jit").glob("*.json"))) == 1


def test_custom_selector_and_fallback(tmp_path):
    lines = _run(tmp_path, "custom_selector.py").splitlines()
    assert all(float(line.split()[-1]) < 1e-5 for line in lines[:4]), lines
    assert lines[4:8] == [
        "allreduce of 4096 bytes -> allreduce_allpairs_packet_4r_i2_inplace",
        "allreduce of 4096 bytes -> allreduce_rs_ag_4r_i4_inplace",
        "allreduce of 262144 bytes -> allreduce_rs_ag_4r_i4_inplace",
        "allreduce of 4194304 bytes -> fallback",
    ]
    # Each distinct request asks the selector once (3 sizes x 2 tag sets); the other 18 calls hit the cache.
    assert lines[8] == "registry: {'selections': 24, 'cache_hits': 18, 'selector_calls': 6}"
