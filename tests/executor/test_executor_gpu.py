"""The executor on real GPUs: every library plan for 2 (and, where the host has them, 4) GPUs, every
data type, sizes from 1 KiB to 64 MiB including odd ones, in and out of place, against a float64
reference (tests/executor/gpu/plan_check.py, one process per GPU under loom.launch). Skipped, with the
reason, without NVIDIA GPUs or torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from loom.algorithms import ALGORITHMS
from loom.compile import compile_algorithm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from test_runtime_gpu import GPUS  # noqa: E402

SIZES = "1000,1024,4100,65536,262160,1048576,1048592,4194316,67108928"


@pytest.mark.gpu
@pytest.mark.parametrize("world", [2, 4])
def test_every_library_plan_matches_float64_reference(world, tmp_path):
    if GPUS < world:
        pytest.skip(f"needs {world} GPUs, this host has {GPUS}")
    pytest.importorskip("torch", reason="the GPU check uses torch tensors")
    for name, algorithm in sorted(ALGORITHMS.items()):
        if world not in algorithm.world_sizes:
            continue
        for inplace in (False, True):
            options = {"root": world - 1} if name == "broadcast" else {}
            text = compile_algorithm(name, world, inplace=inplace, verify=False, **options)
            (tmp_path / f"{name}_{world}r{'_inplace' if inplace else ''}.json").write_text(text)
    command = [sys.executable, "-m", "loom.launch", "-n", str(world), "--timeout", "540"]
    command += [str(ROOT / "tests/executor/gpu/plan_check.py"), "--plans", str(tmp_path), "--sizes", SIZES]
    environment = {**os.environ, "NCCL_NVLS_ENABLE": "0", "LOOM_DEVICE_TIMEOUT_MS": "20000"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "FAIL" not in output, output[-4000:]
