"""The channel runtime on real GPUs: the C++ programs under tests/runtime/gpu, one rank per GPU,
started by `python -m loom.launch`, on 2 GPUs and on 4 when the host has them. Skipped, with the
reason, on hosts without NVIDIA GPUs or without the CUDA build of the programs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
RUN_LIMIT_S = 300


def _gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


GPUS = _gpu_count()


def _program(name: str) -> Path:
    path = BUILD / "tests" / name
    if not path.exists():
        pytest.skip(f"{path} was not built (needs nvcc at build time)")
    return path


def _launch(ranks: int, program: Path, *args: str, env: dict[str, str] | None = None) -> str:
    command = [sys.executable, "-m", "loom.launch", "-n", str(ranks), "--timeout", str(RUN_LIMIT_S - 30)]
    command += ["--no-python", str(program), *args]
    environment = {**os.environ, "NCCL_NVLS_ENABLE": "0", **(env or {})}
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_LIMIT_S, env=environment, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{program.name} on {ranks} ranks failed ({done.returncode}):\n{output}"
    return output


def _needs(gpus: int):
    return pytest.mark.skipif(GPUS < gpus, reason=f"needs {gpus} NVIDIA GPUs, this host has {GPUS}")


@pytest.mark.gpu
@pytest.mark.parametrize("ranks", [pytest.param(2, marks=_needs(2)), pytest.param(4, marks=_needs(4))])
def test_channels_on_gpus(ranks: int) -> None:
    output = _launch(ranks, _program("loom_runtime_gpu_tests"))
    assert "[  PASSED  ]" in output
    assert "FAILED" not in output


@pytest.mark.gpu
@_needs(2)
def test_missing_signal_ends_in_the_timeout_diagnostic() -> None:
    output = _launch(2, _program("loom_runtime_timeout_test"), env={"LOOM_DEVICE_TIMEOUT_MS": "500"})
    assert "semaphore wait on channel 2 (peer 1) timed out after 500 ms" in output
    # Said on stderr without being asked (TimeoutAnnouncer), as a trap surfacing in torch never asks.
    assert "loom: warning: rank 0, thread block" in output and "the kernel stopped there" in output
    assert "rank 0: ok" in output and "rank 1: ok" in output


@pytest.mark.gpu
@_needs(1)
def test_cumem_descriptors_pass_between_two_processes_on_one_gpu() -> None:
    # The descriptor mailbox (fd_passing.hpp) between processes: cuMem allocations exported by file
    # descriptor, imported by the other process, written through a memory channel (issue 53's cuMem path).
    program = _program("loom_runtime_gpu_tests")
    output = _launch(2, program, "--gtest_filter=*CuMem*", env={"LOOM_TEST_ONE_GPU": "1"})
    assert "[  PASSED  ] 2 tests" in output and "FAILED" not in output, output[-4000:]
