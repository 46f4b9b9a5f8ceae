"""nccl-tests, unchanged, over libloom_nccl.so with 4 ranks sharing one GPU (issue 17): NVIDIA's public
nccl-tests, built here from the sources in LOOM_NCCL_TESTS_SRC, run as `-t 4 -g 1 -c 1` (four threads of
one process, one rank each, with their correctness check) from 8 B to 1 GiB. A shim in front of the CUDA
runtime (gpu/one_gpu_devices.c) shows the threads' device indices 0..3 as GPU 0, so the four ranks share
it (LOOM_SHARE_GPU=1); NCCL refuses two ranks on one GPU, so every call must be Loom's, and the log says
why nothing is forwarded. Skipped, with the reason, without a GPU, the library, the sources or make."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from test_runtime_gpu import GPUS  # noqa: E402

BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LIBRARY = BUILD / "executor" / "nccl" / "libloom_nccl.so"
CUDA = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
RANKS = 4

pytestmark = pytest.mark.gpu

# (program, its size range): all-gather's plans above 128 KiB run 48 blocks of 1024 threads per rank,
# more than 4 ranks can keep resident on one GPU at once; Loom refuses them (the refusal is checked).
CASES = {
    "all_reduce_perf": ("8", "1G"),
    "reduce_scatter_perf": ("8", "1G"),
    "broadcast_perf": ("8", "1G"),
    "alltoall_perf": ("8", "1G"),
    "all_gather_perf": ("8", "128K"),
}


def _include_dir() -> Path:
    cache = (BUILD / "CMakeCache.txt").read_text()
    found = re.search(r"^LOOM_NCCL_INCLUDE_DIR:PATH=(.*)$", cache, re.MULTILINE)
    return Path(found.group(1)) if found else CUDA / "include"


@pytest.fixture(scope="module")
def nccl_tests(tmp_path_factory) -> dict[str, Path]:
    """The nccl-tests programs and the shim, built once: linked against a libnccl.so that is this library
    (as a program built against NCCL and run with it preloaded sees it)."""
    if GPUS < 1:
        pytest.skip("needs an NVIDIA GPU, this host has none")
    if not LIBRARY.exists():
        pytest.skip(f"{LIBRARY} was not built (needs the CUDA toolkit and nccl.h at build time)")
    source = os.environ.get("LOOM_NCCL_TESTS_SRC")
    if not source or not (Path(source) / "src" / "Makefile").exists():
        pytest.skip("set LOOM_NCCL_TESTS_SRC to a checkout of github.com/NVIDIA/nccl-tests")
    if shutil.which("make") is None or not (CUDA / "bin" / "nvcc").exists():
        pytest.skip(f"needs make and {CUDA}/bin/nvcc to build nccl-tests")
    work = tmp_path_factory.mktemp("nccl-tests")
    (work / "lib").mkdir()
    (work / "lib" / "libnccl.so").symlink_to(LIBRARY)
    capability = (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader", "-i", "0"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .replace(".", "")
    )
    make = [
        "make",
        "-C",
        str(Path(source) / "src"),
        f"-j{os.cpu_count() or 4}",
        f"BUILDDIR={work / 'bin'}",
        # The shared CUDA runtime, which the shim can wrap; with NVCC not a bare path, the Makefile cannot
        # tell the CUDA version, so the C++ standard that CUDA 13 needs is given too.
        f"CUDA_HOME={CUDA}",
        f"NVCC={CUDA / 'bin' / 'nvcc'} -cudart shared",
        "CXXSTD=-std=c++17",
        f"NVCC_GENCODE=-gencode=arch=compute_{capability},code=sm_{capability}",
        f"NCCL_HOME={work}",
    ]
    environment = {**os.environ, "CPATH": str(_include_dir())}
    built = subprocess.run(make, capture_output=True, text=True, timeout=900, env=environment, check=False)
    assert built.returncode == 0, (built.stdout + built.stderr)[-6000:]
    shim = work / "one_gpu_devices.so"
    compile_shim = ["cc", "-shared", "-fPIC", "-O2", f"-I{CUDA / 'include'}", "-o", str(shim)]
    subprocess.run([*compile_shim, str(ROOT / "tests" / "nccl" / "gpu" / "one_gpu_devices.c"), "-ldl"], check=True)
    # The bundled plans, where the library's registry loads them (as `loom install-plans` puts them).
    subprocess.run([sys.executable, "-m", "loom", "install-plans", "--cache-dir", str(work / "cache")], check=True)
    return {"bin": work / "bin", "lib": work / "lib", "shim": shim, "cache": work / "cache"}


def _run(nccl_tests: dict[str, Path], program: str, low: str, high: str, tmp_path: Path) -> tuple[str, str]:
    binary = nccl_tests["bin"] / program
    environment = {
        **os.environ,
        "LD_PRELOAD": f"{LIBRARY}:{nccl_tests['shim']}",
        "LD_LIBRARY_PATH": f"{nccl_tests['lib']}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        "LOOM_CACHE_DIR": str(nccl_tests["cache"]),
        "LOOM_VIRTUAL_GPUS": str(RANKS),
        "LOOM_SHARE_GPU": "1",
        "CUDA_DEVICE_MAX_CONNECTIONS": "32",
        "NCCL_NVLS_ENABLE": "0",
        "LOOM_DEVICE_TIMEOUT_MS": "20000",
        "LOOM_NCCL_DEBUG": "INFO",
        "LOOM_NCCL_DEBUG_FILE": str(tmp_path / "loom.%p.log"),
    }
    command = [str(binary), "-b", low, "-e", high, "-f", "2", "-t", str(RANKS), "-g", "1", "-c", "1", "-n", "2"]
    command += ["-w", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=environment, check=False)
    logs = "\n".join(path.read_text() for path in sorted(tmp_path.glob("loom.*.log")))
    return done.stdout + done.stderr + f"\nexit status {done.returncode}", logs


@pytest.mark.parametrize("program", sorted(CASES))
def test_nccl_tests_with_4_ranks_on_one_gpu_report_nothing_wrong(nccl_tests, program, tmp_path):
    low, high = CASES[program]
    output, logs = _run(nccl_tests, program, low, high, tmp_path)
    report = f"{output[-6000:]}\n--- Loom log ---\n{logs[-4000:]}"
    print(output)  # nccl-tests' table: kernel costs of 4 ranks on one GPU, not NVLink
    assert output.endswith("exit status 0") and "Out of bounds values : 0 OK" in output, report
    rows = [line.split() for line in output.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\w+", line)]
    assert rows and int(rows[-1][0]) == _bytes(high), report  # every size up to the last was run
    assert "share GPU" in logs and "NCCL refuses two ranks on one GPU" in logs, report
    assert "forwarded to NCCL" not in logs, report


def test_a_plan_whose_blocks_do_not_fit_is_refused_with_the_reason(nccl_tests, tmp_path):
    output, logs = _run(nccl_tests, "all_gather_perf", "1M", "1M", tmp_path)
    assert not output.endswith("exit status 0"), output[-4000:]
    assert "the GPU holds at most" in output + logs, f"{output[-4000:]}\n--- Loom log ---\n{logs[-4000:]}"


def _bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
