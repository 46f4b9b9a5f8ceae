"""One process driving several GPUs through libloom_nccl.so (issue 38): CuPy's NcclCommunicator.initAll with
collectives grouped across the devices (gpu/cupy_init_all.py; before the fix this died with
cudaErrorIllegalAddress: the ranks of one process mapped each other's memory by address without peer
access), and nccl-tests `-g N` (one process, one thread, N GPUs), 8 B to 1 GiB with their check on. Skipped,
with the reason, without 2 GPUs, CuPy, the library or nccl-tests' sources."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from test_runtime_gpu import GPUS  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "nccl"))
from nccl_tests_build import (  # noqa: E402
    build_nccl_tests,
    failure_report,
    nccl_tests_rows,
    real_nccl_library,
    why_not_buildable,
)

BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LIBRARY = BUILD / "executor" / "nccl" / "libloom_nccl.so"
PROGRAMS = ["all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "broadcast_perf", "reduce_perf"]

pytestmark = pytest.mark.gpu


def _needs_gpus() -> None:
    if GPUS < 2:
        pytest.skip(f"needs 2 NVIDIA GPUs in one process, this host has {GPUS}")
    if not LIBRARY.exists():
        pytest.skip(f"{LIBRARY} was not built (needs the CUDA toolkit and nccl.h at build time)")


def _environment(tmp_path: Path, cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LD_PRELOAD": str(LIBRARY),
        "LOOM_CACHE_DIR": str(cache),
        "NCCL_NVLS_ENABLE": "0",
        "LOOM_DEVICE_TIMEOUT_MS": "20000",
        "LOOM_NCCL_DEBUG": "INFO",
        "LOOM_NCCL_DEBUG_FILE": str(tmp_path / "loom.%p.log"),
    }


def _install_plans(cache: Path) -> None:
    subprocess.run([sys.executable, "-m", "loom", "install-plans", "--cache-dir", str(cache)], check=True, timeout=300)


def _logs(tmp_path: Path) -> str:
    return "\n".join(path.read_text() for path in sorted(tmp_path.glob("loom.*.log")))


def test_cupy_init_all_with_grouped_collectives(tmp_path: Path) -> None:
    _needs_gpus()
    pytest.importorskip("cupy", reason="the program is CuPy's NCCL bindings")
    cache = tmp_path / "cache"
    _install_plans(cache)
    script = ROOT / "tests" / "nccl" / "gpu" / "cupy_init_all.py"
    sizes = [str(size) for size in (8, 1024, 65536, 4 << 20, 64 << 20)]
    done = subprocess.run(
        [sys.executable, str(script), *sizes],
        capture_output=True,
        text=True,
        timeout=300,
        env=_environment(tmp_path, cache),
        check=False,
    )
    output, logs = done.stdout + done.stderr, _logs(tmp_path)
    assert done.returncode == 0 and "OK" in output.splitlines(), f"{output[-6000:]}\n--- Loom log ---\n{logs[-6000:]}"
    # Every collective of the group ran on a Loom plan, the all-reduce of 4 MiB per GPU of the report included.
    assert "AllReduce 1048576 x float32 sum out of place: Loom plan '" in logs, logs[-6000:]
    assert "forwarded to NCCL" not in logs, [line for line in logs.splitlines() if "forwarded" in line][:8]


@pytest.fixture(scope="module")
def nccl_tests(tmp_path_factory) -> dict[str, Path]:
    _needs_gpus()
    reason = why_not_buildable(LIBRARY)
    if reason:
        pytest.skip(reason)
    real = real_nccl_library()
    if real is None:
        pytest.skip("needs the real libnccl.so.2 (PyTorch's NCCL wheel or the CUDA toolkit's) to link against")
    source = os.environ.get("LOOM_NCCL_TESTS_SRC")
    if not source or not Path(source).is_dir():
        pytest.skip("needs nccl-tests' sources in LOOM_NCCL_TESTS_SRC")
    work = tmp_path_factory.mktemp("nccl-tests-threads")
    try:
        binaries = build_nccl_tests(Path(source), work, real, BUILD)
    except RuntimeError as error:
        pytest.fail(str(error))
    _install_plans(work / "cache")
    return {"bin": binaries, "real": real.parent, "cache": work / "cache"}


@pytest.mark.parametrize("program", PROGRAMS)
def test_nccl_tests_one_process_every_gpu(nccl_tests, program, tmp_path: Path) -> None:
    environment = _environment(tmp_path, nccl_tests["cache"])
    environment["LD_LIBRARY_PATH"] = f"{nccl_tests['real']}:{os.environ.get('LD_LIBRARY_PATH', '')}"
    command = [str(nccl_tests["bin"] / program), "-b", "8", "-e", "1G", "-f", "2", "-g", str(GPUS), "-c", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=environment, check=False)
    output, logs = done.stdout + done.stderr, _logs(tmp_path)
    report = failure_report(output, logs)
    print(output)
    assert done.returncode == 0 and "Out of bounds values : 0 OK" in output, report
    rows = nccl_tests_rows(output)
    assert rows and int(rows[-1][0]) == 1 << 30, report
    wrong = [row[0] for row in rows if len(row) >= 13 and (row[8] not in ("0", "N/A") or row[12] not in ("0", "N/A"))]
    assert not wrong, f"sizes with wrong elements: {wrong}\n{report}"
    assert "Loom plan '" in logs, report
