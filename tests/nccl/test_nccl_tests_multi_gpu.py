"""nccl-tests, unchanged, over libloom_nccl.so on every GPU of the host (issues 20 and 21): NVIDIA's public
nccl-tests, built here with MPI from the sources in LOOM_NCCL_TESTS_SRC and linked against the real NCCL,
started by mpirun as one process per GPU (`-g 1 -c 1`, their data check on) with the library preloaded, from 8 B to
1 GiB. Every size must report 0 wrong, and Loom's log must show its plans ran. Skipped, with the reason,
without 2 GPUs, the library, the sources, make, MPI or the real NCCL."""

from __future__ import annotations

import os
import shutil
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
    mpi_home,
    mpirun_command,
    nccl_tests_rows,
    real_nccl_library,
    why_not_buildable,
)

BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LIBRARY = BUILD / "executor" / "nccl" / "libloom_nccl.so"
RANKS = max(2, GPUS)  # every GPU of the host, one process each
PROGRAMS = [
    "all_reduce_perf",
    "all_gather_perf",
    "reduce_scatter_perf",
    "broadcast_perf",
    "reduce_perf",
    "alltoall_perf",
    "sendrecv_perf",
]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nccl_tests(tmp_path_factory) -> dict[str, Path]:
    """The nccl-tests programs, built once with MPI against the real NCCL, and the bundled plans installed
    where the library's registry loads them."""
    if GPUS < RANKS:
        pytest.skip(f"needs {RANKS} NVIDIA GPUs, this host has {GPUS}")
    reason = why_not_buildable(LIBRARY)
    if reason:
        pytest.skip(reason)
    source = os.environ["LOOM_NCCL_TESTS_SRC"]
    mpi, real = mpi_home(), real_nccl_library()
    if mpi is None or shutil.which("mpirun") is None:
        pytest.skip("needs an MPI installation (mpirun, include/mpi.h) to build nccl-tests with MPI=1")
    if real is None:
        pytest.skip("needs the real libnccl.so.2 (PyTorch's NCCL wheel or the CUDA toolkit's) to link against")
    work = tmp_path_factory.mktemp("nccl-tests-mpi")
    try:
        binaries = build_nccl_tests(Path(source), work, real, BUILD, mpi=mpi)
    except RuntimeError as error:
        pytest.fail(str(error))
    subprocess.run([sys.executable, "-m", "loom", "install-plans", "--cache-dir", str(work / "cache")], check=True)
    return {"bin": binaries, "lib": work / "lib", "real": real.parent, "cache": work / "cache"}


@pytest.mark.parametrize("program", PROGRAMS)
def test_nccl_tests_on_every_gpu_under_mpi_report_nothing_wrong(nccl_tests, program, tmp_path):
    environment = {
        "LD_PRELOAD": str(LIBRARY),
        "LD_LIBRARY_PATH": f"{nccl_tests['real']}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "LOOM_CACHE_DIR": str(nccl_tests["cache"]),
        "NCCL_NVLS_ENABLE": "0",
        "LOOM_DEVICE_TIMEOUT_MS": "20000",
        "LOOM_NCCL_DEBUG": "INFO",
        "LOOM_NCCL_DEBUG_FILE": str(tmp_path / "loom.%p.log"),
    }
    command = mpirun_command(RANKS, environment)
    command += [str(nccl_tests["bin"] / program), "-b", "8", "-e", "1G", "-f", "2", "-g", "1", "-c", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, check=False)
    output = done.stdout + done.stderr
    logs = "\n".join(path.read_text() for path in sorted(tmp_path.glob("loom.*.log")))
    report = failure_report(output, logs)
    print(output)  # nccl-tests' table: the GPUs over NVLink
    assert done.returncode == 0 and "Out of bounds values : 0 OK" in output, report
    rows = nccl_tests_rows(output)
    assert rows and int(rows[-1][0]) == 1 << 30, report  # every size up to 1 GiB was run
    wrong = [row[0] for row in rows if len(row) >= 13 and (row[8] not in ("0", "N/A") or row[12] not in ("0", "N/A"))]
    assert not wrong, f"sizes with wrong elements: {wrong}\n{report}"
    assert "Loom plan '" in logs, report  # Loom ran the calls (those it forwards are logged as such)
