"""A torch job of point-to-point traffic under libloom_nccl.so against the same job on plain NCCL (issue 39):
gpu/torch_point_to_point_job.py (a two-stage pipeline, an MoE layer whose all_to_all_single splits change every
step, batch_isend_irecv, gather and scatter) on 2 GPUs. Both runs must give the very same numbers (the traffic
only copies), and Loom must have run the sends and receives: they are the job's calls between ranks. Skipped,
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


def _job(results: Path, tmp_path: Path, loom: bool) -> str:
    environment = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    if loom:
        environment |= {
            "LD_PRELOAD": str(LIBRARY),
            "LOOM_CACHE_DIR": str(tmp_path / "cache"),  # empty: the pair's all-to-all-v plan comes from the JIT
            "LOOM_NCCL_DEBUG": "INFO",
            "LOOM_NCCL_DEBUG_FILE": str(tmp_path / "loom.%h.%p.log"),
            "LOOM_NCCL_STATS": str(tmp_path / "coverage.%h.%p.json"),
            "LOOM_DEVICE_TIMEOUT_MS": "20000",
        }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}"]
    command += [str(ROOT / "tests" / "nccl" / "gpu" / "torch_point_to_point_job.py"), str(results)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment, check=False)
    logs = "\n".join(path.read_text() for path in sorted(tmp_path.glob("loom.*.log")))
    assert done.returncode == 0, f"{(done.stdout + done.stderr)[-6000:]}\n--- Loom log ---\n{logs[-6000:]}"
    return logs


def test_point_to_point_job_matches_nccl_bit_for_bit(tmp_path: Path) -> None:
    if GPUS < WORLD:
        pytest.skip(f"needs {WORLD} NVIDIA GPUs, this host has {GPUS}")
    pytest.importorskip("torch", reason="the program is a torch.distributed job")
    if not LIBRARY.exists():
        pytest.skip(f"{LIBRARY} was not built (needs the CUDA toolkit and nccl.h at build time)")
    logs = _job(tmp_path / "loom", tmp_path / "with_loom", loom=True)
    _job(tmp_path / "nccl", tmp_path / "plain", loom=False)
    for rank in range(WORLD):
        loom = json.loads((tmp_path / "loom" / f"rank{rank}.json").read_text())
        nccl = json.loads((tmp_path / "nccl" / f"rank{rank}.json").read_text())
        assert loom == nccl, f"rank {rank}: {loom} under Loom, {nccl} on NCCL"
    coverage = read_coverage(sorted((tmp_path / "with_loom").glob("coverage.*.json")))
    print(format_coverage(coverage))
    print("\n".join(line for line in logs.splitlines() if "forwarded" in line or "JIT" in line))
    calls_share, bytes_share = coverage.loom_share()
    assert calls_share >= 0.95 and bytes_share >= 0.95, format_coverage(coverage)
