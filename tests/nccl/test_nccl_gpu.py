"""libloom_nccl.so under an unchanged torch.distributed program (gpu/torch_collectives.py), started by
torchrun with LD_PRELOAD: every collective, eagerly and replayed from torch.cuda.graph, values checked.
World size 1 on one GPU (every call a local copy or nothing, on the call's stream), and world sizes 2,
4 and 8 where the host has that many GPUs. Skipped, with the reason, without GPUs, torch or the library."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from test_runtime_gpu import GPUS  # noqa: E402

BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LIBRARY = BUILD / "executor" / "nccl" / "libloom_nccl.so"


def _torchrun(world: int, tmp_path: Path, **env: str) -> str:
    if GPUS < world:
        pytest.skip(f"needs {world} NVIDIA GPUs, this host has {GPUS}")
    pytest.importorskip("torch", reason="the program is a torch.distributed job")
    if not LIBRARY.exists():
        pytest.skip(f"{LIBRARY} was not built (needs the CUDA toolkit and nccl.h at build time)")
    # The bundled plans installed as docs/nccl.md says (`loom install-plans`), into a cache of this test's own.
    cache = {"LOOM_CACHE_DIR": str(tmp_path / "cache")}
    install = [sys.executable, "-m", "loom", "install-plans"]
    subprocess.run(install, check=True, capture_output=True, timeout=120, env={**os.environ, **cache})
    environment = {
        **os.environ,
        **cache,
        "LD_PRELOAD": str(LIBRARY),
        "LOOM_NCCL_DEBUG": "INFO",
        "NCCL_NVLS_ENABLE": "0",
        "LOOM_NCCL_DEBUG_FILE": str(tmp_path / "loom.%h.%p.log"),
        **env,
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}"]
    command.append(str(ROOT / "tests" / "nccl" / "gpu" / "torch_collectives.py"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment, check=False)
    logs = "\n".join(path.read_text() for path in sorted(tmp_path.glob("loom.*.log")))
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{output[-6000:]}\n--- Loom log ---\n{logs[-6000:]}"
    for rank in range(world):
        assert f"OK {rank}" in output, output[-4000:]
    return logs


@pytest.mark.gpu
def test_torch_world_size_one(tmp_path: Path) -> None:
    logs = _torchrun(1, tmp_path)
    assert re.search(r"ncclCommInitRank(Config)? rank 0/1", logs), logs[-4000:]  # torch passes a config
    assert "AllReduce" in logs and "nothing to do (one rank, in place)" in logs, logs[-4000:]
    # torch's all_to_all is grouped send/recv (to itself here): NCCL's; every collective is Loom's.
    forwarded = [line for line in logs.splitlines() if "forwarded to NCCL" in line]
    assert all(" Send " in line or " Recv " in line for line in forwarded), forwarded


@pytest.mark.gpu
@pytest.mark.parametrize("world", [2, 4, 8], ids=["2_gpus", "4_gpus", "8_gpus"])
def test_torch_on_gpus(world: int, tmp_path: Path) -> None:
    logs = _torchrun(world, tmp_path)
    assert "Loom plan '" in logs, logs[-4000:]


@pytest.mark.gpu
def test_torch_forced_to_nccl(tmp_path: Path) -> None:
    logs = _torchrun(1 if GPUS < 2 else 2, tmp_path, LOOM_NCCL_FORCE_NCCL="1")
    if GPUS >= 2:
        assert "forwarded to NCCL: LOOM_NCCL_FORCE_NCCL is set" in logs, logs[-4000:]
