"""A torch parallel training job under libloom_nccl.so against the same job on plain NCCL (issue 38):
gpu/torch_parallel_job.py, with the default group bound to the device so that torch makes every DeviceMesh
group through ncclCommSplit, runs FSDP2 with HSDP, tensor-parallel collectives and DDP on a 2-D mesh of
1 x 2 and 2 x 1. Both runs must give the same losses and parameters (to float rounding: Loom sums in
another order than NCCL), and Loom's plans must run the collectives of the split communicators. Skipped,
with the reason, without 2 GPUs, torch or the library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from loom.runtime.nccl_coverage import format_coverage, read_coverage

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from test_runtime_gpu import GPUS  # noqa: E402

BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LIBRARY = BUILD / "executor" / "nccl" / "libloom_nccl.so"
WORLD = 2

pytestmark = pytest.mark.gpu


def _job(mesh: str, results: Path, tmp_path: Path, loom: bool) -> tuple[str, str]:
    environment = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    if loom:
        cache = tmp_path / "cache"
        subprocess.run([sys.executable, "-m", "loom", "install-plans", "--cache-dir", str(cache)], check=True)
        environment |= {
            "LD_PRELOAD": str(LIBRARY),
            "LOOM_CACHE_DIR": str(cache),
            "LOOM_NCCL_DEBUG": "INFO",
            "LOOM_NCCL_DEBUG_FILE": str(tmp_path / "loom.%h.%p.log"),
            "LOOM_NCCL_STATS": str(tmp_path / "coverage.%h.%p.json"),
            "LOOM_DEVICE_TIMEOUT_MS": "20000",
        }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}"]
    command += [str(ROOT / "tests" / "nccl" / "gpu" / "torch_parallel_job.py"), mesh, str(results)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment, check=False)
    logs = "\n".join(path.read_text() for path in sorted(tmp_path.glob("loom.*.log")))
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{output[-6000:]}\n--- Loom log ---\n{logs[-6000:]}"
    return output, logs


def _close(name: str, got: object, want: object) -> None:
    if isinstance(want, dict):
        assert got.keys() == want.keys(), name
        for key in want:
            _close(f"{name}.{key}", got[key], want[key])
    elif isinstance(want, list):
        assert len(got) == len(want), name
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            _close(f"{name}[{index}]", a, b)
    else:
        assert got == pytest.approx(want, rel=2e-3, abs=1e-3), f"{name}: {got} under Loom, {want} on NCCL"


@pytest.mark.parametrize("mesh", ["1x2", "2x1"])
def test_parallel_job_matches_nccl(mesh: str, tmp_path: Path) -> None:
    if GPUS < WORLD:
        pytest.skip(f"needs {WORLD} NVIDIA GPUs, this host has {GPUS}")
    pytest.importorskip("torch", reason="the program is a torch.distributed job")
    if not LIBRARY.exists():
        pytest.skip(f"{LIBRARY} was not built (needs the CUDA toolkit and nccl.h at build time)")
    _, logs = _job(mesh, tmp_path / "loom", tmp_path / "with_loom", loom=True)
    _job(mesh, tmp_path / "nccl", tmp_path / "plain", loom=False)
    for rank in range(WORLD):
        loom = json.loads((tmp_path / "loom" / f"rank{rank}.json").read_text())
        nccl = json.loads((tmp_path / "nccl" / f"rank{rank}.json").read_text())
        _close(f"rank {rank}", loom, nccl)
    # The communicators of the mesh came from ncclCommSplit and ran Loom plans: at least 95% of the calls
    # and bytes that moved between ranks, summed over every communicator of both ranks.
    assert "ncclCommSplit of comm" in logs, logs[-4000:]
    coverage = read_coverage(sorted((tmp_path / "with_loom").glob("coverage.*.json")))
    print(f"mesh {mesh}:\n{format_coverage(coverage)}")
    print("\n".join(line for line in logs.splitlines() if "forwarded" in line or "ncclComm" in line))
    calls_share, bytes_share = coverage.loom_share()
    assert coverage.communicators >= 2 * 2 and calls_share >= 0.95 and bytes_share >= 0.95, format_coverage(coverage)
