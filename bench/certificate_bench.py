"""What checking plans before they run costs (issue 54): a fresh install of the bundled plans plus a job's first
call, with this Loom against the Loom just before the checks (commit 541b677: no content hashes in the
installer's index, no certificates), and the price of a certificate on its own.

Each sample is a fresh process with a fresh cache root: ``loom install-plans``, then 2 ranks (threads, CPU
backend) make their first 4 KiB all-reduce through loom.Communicator (the registry loads the index, checks
each bundled plan's hash as it is selected). The two Looms take turns; medians are reported. Separately:
``prove`` of a library plan's text with its certificate present (a hash and an lstat) and without (the
verifier runs).

    git worktree add /tmp/oldtree 541b677 && cmake -S /tmp/oldtree -B /tmp/oldtree/build -G Ninja \\
        -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_TESTS=OFF && ninja -C /tmp/oldtree/build
    python bench/certificate_bench.py --old /tmp/oldtree [--runs 7]

Writes docs/perf/certificates.md's table (stdout) and docs/perf/certificates.png.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loom.version import __version__

ROOT = Path(__file__).resolve().parents[1]

# Runs a Loom from `package` (a folder holding the loom package with its _native module), past the editable
# install's finder; installs the plans into the cache root and makes the first call; prints both times.
SAMPLE = r"""
import sys, time
started = time.perf_counter()
package = sys.argv[1]
if package:
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, package)
from loom.tools.cli import main as cli
try:
    cli(["install-plans"])
except SystemExit:
    pass
installed = time.perf_counter()
import numpy as np
import loom
from loom import _native
from loom.runtime.host_ranks import run_ranks
def body(bootstrap):
    comm = loom.Communicator(bootstrap, host_only=True)
    data = np.ones(1024, np.float32)
    comm.all_reduce(data)
    assert data[0] == 2
results = run_ranks(2, _native.UniqueId.create("127.0.0.1"), body, timeout_ms=60000)
assert not any(isinstance(r, BaseException) for r in results.values()), results
print(installed - started, time.perf_counter() - installed, loom.__file__)
"""


def old_package(tree: Path) -> Path:
    """The older Loom as an importable folder laid out as a checkout (its plans and schemas beside it): its
    loom package with its built _native module."""
    folder = Path(tempfile.mkdtemp(prefix="loom-old-"))
    shutil.copytree(tree / "compiler" / "loom", folder / "compiler" / "loom")
    for module in (tree / "build").glob("_native*.so"):
        shutil.copy(module, folder / "compiler" / "loom" / module.name)
    for name in ("plans", "schemas"):
        (folder / name).symlink_to(tree / name)
    return folder / "compiler"


def sample(package: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as cache:
        environment = {**os.environ, "LOOM_CACHE_DIR": cache}
        out = subprocess.run(
            [sys.executable, "-c", SAMPLE, package], env=environment, capture_output=True, text=True, timeout=300
        )
        if out.returncode != 0:
            raise SystemExit(out.stderr[-3000:])
        install, first, where = out.stdout.strip().splitlines()[-1].split()
        if package and not where.startswith(package):
            raise SystemExit(f"the old Loom was not the one imported: {where}")
        return float(install), float(first)


def certificate_costs(runs: int) -> tuple[float, float]:
    """Median seconds of prove() for a library plan's text: certified (a hash and an lstat), and not (verify)."""
    from loom.compiler.driver import compile_algorithm
    from loom.verify import certificate

    text = compile_algorithm("allreduce_allpairs_packet", 8, verify=False)
    warm, cold = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as store:
            certificate._CERTIFIED_HERE.clear()  # as a fresh process finds it: no proof in memory
            started = time.perf_counter()
            certificate.prove(text, "bench", Path(store))
            cold.append(time.perf_counter() - started)
            certificate._CERTIFIED_HERE.clear()  # the certificate file, as another process reads it
            started = time.perf_counter()
            certificate.prove(text, "bench", Path(store))
            warm.append(time.perf_counter() - started)
    return statistics.median(warm), statistics.median(cold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the worktree of commit 541b677, built")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "perf" / "certificates.png")
    args = parser.parse_args()
    old = str(old_package(args.old))
    times: dict[str, list[tuple[float, float]]] = {"before the checks (541b677)": [], f"this Loom ({__version__})": []}
    for _ in range(args.runs):
        times["before the checks (541b677)"].append(sample(old))
        times[f"this Loom ({__version__})"].append(sample(""))
    warm, cold = certificate_costs(args.runs)
    print(
        f"{datetime.date.today()}, {platform.node()}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, {args.runs} runs, medians"
    )
    print()
    print("| Loom | install (s) | first call (s) | both (s) |")
    print("|---|---|---|---|")
    medians = {}
    for name, samples in times.items():
        install = statistics.median(s[0] for s in samples)
        first = statistics.median(s[1] for s in samples)
        medians[name] = (install, first)
        print(f"| {name} | {install:.3f} | {first:.3f} | {install + first:.3f} |")
    before, now = (sum(value) for value in medians.values())
    print()
    print(f"install plus first call: {100 * (now / before - 1):+.1f}% against the Loom before the checks")
    plan = "allreduce_allpairs_packet, 8 ranks"
    print(f"prove(): {1e3 * warm:.2f} ms with a certificate, {1e3 * cold:.1f} ms verifying ({plan})")
    plot(medians, args.plot)


def plot(medians: dict[str, tuple[float, float]], path: Path) -> None:
    """Stacked bars: install, then first call, per Loom."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 3))
    names = list(medians)
    axes.barh(names, [m[0] for m in medians.values()], label="install-plans")
    axes.barh(names, [m[1] for m in medians.values()], left=[m[0] for m in medians.values()], label="first call")
    axes.set_xlabel("seconds (median of fresh processes)")
    axes.set_title(f"install + first all-reduce, 2 CPU-backend ranks ({datetime.date.today()})", fontsize=10)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
