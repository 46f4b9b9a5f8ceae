"""NVIDIA's nccl-tests built for the GPU tests and bench/nccl_bench.py: from the sources in a checkout, for
this host's GPU, linked against a folder whose lib/libnccl.so is the NCCL the programs should see (the
real one, so that preloading libloom_nccl.so is what puts Loom in front; or Loom's own library), with
MPI (one process per GPU, started by mpirun) when an MPI installation is given.

    python tests/nccl/nccl_tests_build.py OUT   # LOOM_NCCL_TESTS_SRC's sources, against the real NCCL,
                                                # with MPI when found; prints `mpi=... real_nccl_dir=...`
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

CUDA = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


def why_not_buildable(library: Path) -> str | None:
    """Why the nccl-tests GPU tests cannot run here (their skip reason), or None: Loom's NCCL library
    `library`, nccl-tests' sources in LOOM_NCCL_TESTS_SRC, make and nvcc are all needed."""
    if not library.exists():
        return f"{library} was not built (needs the CUDA toolkit and nccl.h at build time)"
    source = os.environ.get("LOOM_NCCL_TESTS_SRC")
    if not source or not (Path(source) / "src" / "Makefile").exists():
        return "set LOOM_NCCL_TESTS_SRC to a checkout of github.com/NVIDIA/nccl-tests"
    if shutil.which("make") is None or not (CUDA / "bin" / "nvcc").exists():
        return f"needs make and {CUDA}/bin/nvcc to build nccl-tests"
    return None


def nccl_include_dir(build: Path) -> Path:
    """Where the Loom build found nccl.h (the NCCL API the library implements)."""
    cache = (build / "CMakeCache.txt").read_text()
    found = re.search(r"^LOOM_NCCL_INCLUDE_DIR:PATH=(.*)$", cache, re.MULTILINE)
    return Path(found.group(1)) if found else CUDA / "include"


def real_nccl_library() -> Path | None:
    """The real libnccl.so.2: PyTorch's copy (the NCCL torch.distributed runs), else the CUDA toolkit's."""
    candidates = []
    try:
        import nvidia.nccl  # the NCCL wheel PyTorch depends on

        candidates += [Path(folder) / "lib" / "libnccl.so.2" for folder in nvidia.nccl.__path__]
    except ImportError:
        pass
    candidates += [CUDA / "lib64" / "libnccl.so.2", Path("/usr/lib/x86_64-linux-gnu/libnccl.so.2")]
    return next((path for path in candidates if path.exists()), None)


def mpi_home() -> Path | None:
    """The MPI installation whose include/mpi.h and lib/libmpi.so nccl-tests' MPI=1 build needs, found from
    mpicc (Open MPI's --showme, MPICH's -show) or from mpirun's folder; None when there is none."""
    candidates = []
    mpicc = shutil.which("mpicc")
    for flag in ("--showme:incdirs", "-show"):
        if mpicc is None:
            break
        shown = subprocess.run([mpicc, flag], capture_output=True, text=True, check=False).stdout
        candidates += [Path(word.removeprefix("-I")).parent for word in shown.split() if word.startswith(("-I", "/"))]
    mpirun = shutil.which("mpirun")
    if mpirun is not None:
        candidates.append(Path(mpirun).resolve().parent.parent)
    candidates += [Path("/usr/lib/x86_64-linux-gnu/openmpi"), Path("/opt/hpcx/ompi"), Path("/usr/local/mpi")]
    return next((home for home in candidates if (home / "include" / "mpi.h").exists()), None)


def mpirun_command(ranks: int, environment: dict[str, str]) -> list[str]:
    """mpirun for `ranks` local processes with `environment` set in each (and not in mpirun itself)."""
    mpirun = shutil.which("mpirun") or "mpirun"
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, check=False)
    command = [mpirun, "-np", str(ranks)]
    if "Open MPI" in version.stdout + version.stderr or "OpenRTE" in version.stdout + version.stderr:
        command += ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
        for name, value in environment.items():
            command += ["-x", f"{name}={value}"]
    else:  # MPICH and its kin
        for name, value in environment.items():
            command += ["-env", name, value]
    return command


def compute_capability() -> str:
    found = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.strip().replace(".", "")


def build_nccl_tests(source: Path, work: Path, nccl_library: Path, build: Path, mpi: Path | None = None) -> Path:
    """Build every nccl-tests program into work/bin, linked against `nccl_library` (as lib/libnccl.so in
    work); returns work/bin. Raises with make's output when the build fails."""
    work = work.resolve()  # make runs in the sources folder
    (work / "lib").mkdir(parents=True, exist_ok=True)
    (work / "lib" / "libnccl.so").unlink(missing_ok=True)
    (work / "lib" / "libnccl.so").symlink_to(nccl_library)
    capability = compute_capability()
    make = ["make", "-C", str(source / "src"), f"-j{os.cpu_count() or 4}", f"BUILDDIR={work / 'bin'}"]
    # The shared CUDA runtime, which a shim can wrap; with NVCC not a bare path, the Makefile cannot tell the
    # CUDA version, so the C++ standard that CUDA 13 needs is given too.
    make += [f"CUDA_HOME={CUDA}", f"NVCC={CUDA / 'bin' / 'nvcc'} -cudart shared", "CXXSTD=-std=c++17"]
    make += [f"NVCC_GENCODE=-gencode=arch=compute_{capability},code=sm_{capability}", f"NCCL_HOME={work}"]
    if mpi is not None:
        make += ["MPI=1", f"MPI_HOME={mpi}"]
    environment = {**os.environ, "CPATH": str(nccl_include_dir(build))}
    built = subprocess.run(make, capture_output=True, text=True, timeout=900, env=environment, check=False)
    if built.returncode != 0:
        raise RuntimeError(f"building nccl-tests failed:\n{(built.stdout + built.stderr)[-6000:]}")
    return work / "bin"


def nccl_tests_rows(output: str) -> list[list[str]]:
    """The result rows of an nccl-tests table (size count type redop root | time algbw busbw #wrong, out of
    place | the same in place)."""
    return [line.split() for line in output.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\w+", line)]


def size_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def failure_report(output: str, logs: str) -> str:
    """The end of a run's output and of Loom's log, with the log's warnings and errors (device timeouts
    name the rank, block and op) wherever they were."""
    alerts = [line for line in logs.splitlines() if re.search(r"WARN|ERROR|timed out", line)]
    return f"{output[-6000:]}\n--- Loom warnings ---\n" + "\n".join(alerts[:20]) + f"\n--- Loom log ---\n{logs[-3000:]}"


def main() -> None:
    out = Path(sys.argv[1])
    mpi, real = mpi_home(), real_nccl_library()
    if real is None:
        sys.exit("no real libnccl.so.2 found (PyTorch's NCCL wheel or the CUDA toolkit's)")
    root = Path(__file__).resolve().parents[2]
    build = Path(os.environ.get("LOOM_BUILD_DIR", root / "build"))
    build_nccl_tests(Path(os.environ["LOOM_NCCL_TESTS_SRC"]), out, real, build, mpi=mpi)
    print(f"mpi={'1' if mpi else ''} real_nccl_dir={real.parent}")


if __name__ == "__main__":
    main()
