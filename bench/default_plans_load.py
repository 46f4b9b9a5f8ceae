"""How long an executor's first start takes to register the bundled plans (PlanRegistry::
ensureDefaultPlansLoaded, which loom.Communicator and ncclCommInitRank wait for), by install layout.

Lays out the bundled plans (plans/default) three ways under a temporary cache root:

- ``json``: plain NAME.json files, as Loom installed them before issue 38 (every plan decoded at load);
- ``gzip``: NAME.json.gz without the index (every plan decompressed and decoded at load);
- ``installed``: what the installer writes, NAME.json.gz with .index (plans registered from the index,
  each decoded when first selected);

then, in a fresh process per sample (the registry loads once per process) and taking the layouts in
turns, times the load, and the first selection of the largest plan. Reports medians.

    python bench/default_plans_load.py [--runs 9]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from loom.runtime.install_plans import bundled_plans, install_default_plans
from loom.version import __version__

SAMPLE = r"""
import sys, time
from loom.native import native_module
native = native_module()
start = time.perf_counter()
skipped = native.registry_load_default_plans()
loaded = time.perf_counter() - start
start = time.perf_counter()
plan = native.registry_select("allreduce", 64 << 20, "float32", 4, 4)
selected = time.perf_counter() - start
print(loaded, selected, len(native.registry_list()), len(skipped), plan.name)
"""


def _layouts(root: Path) -> dict[str, Path]:
    plans = bundled_plans()
    json_root, gzip_root, installed_root = root / "json", root / "gzip", root / "installed"
    (json_root / "default").mkdir(parents=True)
    (gzip_root / "default").mkdir(parents=True)
    for plan in plans:
        shutil.copy(plan, json_root / "default" / plan.name)
        (gzip_root / "default" / f"{plan.name}.gz").write_bytes(gzip.compress(plan.read_bytes(), mtime=0))
    install_default_plans(installed_root / "default")
    return {"json": json_root, "gzip": gzip_root, "installed": installed_root}


def _size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.iterdir() if path.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="samples per layout (fresh processes)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loom_plans_load_") as folder:
        layouts = _layouts(Path(folder))
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in layouts}
        shape = {}
        for _ in range(args.runs):
            for name, root in layouts.items():
                env = dict(os.environ, LOOM_CACHE_DIR=str(root), LOOM_DEFAULT_PLANS="1")
                done = subprocess.run(
                    [sys.executable, "-c", SAMPLE], env=env, capture_output=True, text=True, check=True, timeout=300
                )
                loaded, selected, registered, skipped, plan = done.stdout.split()
                samples[name].append((float(loaded), float(selected)))
                shape[name] = (registered, skipped, plan)
        print(
            f"loom {__version__}, {platform.node()}, {os.cpu_count()} CPUs, {platform.python_version()}, "
            f"{datetime.date.today()}; {len(bundled_plans())} bundled plans, median of {args.runs} fresh processes"
        )
        print(f"{'layout':10} {'folder':>10} {'load':>10} {'first select':>14}  registered, skipped, plan")
        for name, root in layouts.items():
            load = statistics.median(sample[0] for sample in samples[name]) * 1e3
            select = statistics.median(sample[1] for sample in samples[name]) * 1e3
            size = _size(root / "default") / (1 << 20)
            print(f"{name:10} {size:7.1f} MiB {load:7.1f} ms {select:11.1f} ms  {', '.join(shape[name])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
