"""nccl-tests, unchanged, over every NCCL-compatible library on the same GPUs in one run (issue 40): the real
NCCL, libloom_nccl.so preloaded, and MSCCL++'s libmscclpp_nccl.so preloaded (its fallback for what it does not
run itself pointed at the same real NCCL, MSCCLPP_NCCL_LIB_PATH). nccl-tests is built once (MPI=1 when MPI is
found: one process per GPU) against the real NCCL, so that the preload is what puts a library in front. The
sides take turns, --rounds times per program, and each size keeps its medians; nccl-tests' own check (-c 1)
counts the wrong elements of every run.

    LOOM_NCCL_TESTS_SRC=.dev/nccl-tests python bench/nccl_tests_peers.py --nproc 2 \\
        --mscclpp build-mscclpp/build/lib/libmscclpp_nccl.so --out nccl_tests_peers.json

Without --mscclpp only NCCL and Loom run. Prints a table per program (out-of-place time, µs) and writes the
data as JSON with the device, date and versions.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "nccl"))
from nccl_bench import Side, human, install_plans, merge_nccl_tests, run_nccl_tests  # noqa: E402

PROGRAMS = "all_reduce_perf,all_gather_perf,reduce_scatter_perf,alltoall_perf"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=2, help="ranks (GPUs)")
    parser.add_argument("--programs", default=PROGRAMS, help="nccl-tests programs, comma-separated")
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=1 << 30)
    parser.add_argument("--rounds", type=int, default=3, help="turns of every side per program; medians are kept")
    parser.add_argument("--library", default="", help="libloom_nccl.so (default: loom nccl-path)")
    parser.add_argument("--mscclpp", default="", help="MSCCL++'s libmscclpp_nccl.so (scripts/mscclpp_build.sh)")
    parser.add_argument("--nccl-tests", default="", help="nccl-tests' built programs (default: build them here)")
    parser.add_argument("--out", default="", help="where the JSON goes")
    return parser.parse_args(argv)


class PreloadSide:
    """A library put in front of the real NCCL with LD_PRELOAD, which logs nothing Loom can check."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def check_routes(self, program: str) -> None:
        pass


def sides(args: argparse.Namespace, work: Path, real_nccl: Path) -> dict[str, object]:
    library = (
        args.library
        or subprocess.run(
            [sys.executable, "-m", "loom", "nccl-path"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    install_plans(work)
    found = {"nccl": Side(library, False, work), "loom": Side(library, True, work)}
    if args.mscclpp:
        env = {"NCCL_NVLS_ENABLE": "0", "LD_PRELOAD": args.mscclpp, "MSCCLPP_NCCL_LIB_PATH": str(real_nccl)}
        found["mscclpp"] = PreloadSide(env)
    return found


def build(args: argparse.Namespace, work: Path) -> tuple[Path, bool]:
    """nccl-tests' programs (args.nccl_tests, else built here against the real NCCL) and whether they use MPI."""
    from nccl_tests_build import build_nccl_tests, mpi_home

    mpi = mpi_home()
    if args.nccl_tests:
        return Path(args.nccl_tests), mpi is not None
    source = os.environ.get("LOOM_NCCL_TESTS_SRC")
    if not source:
        raise SystemExit("set LOOM_NCCL_TESTS_SRC to nccl-tests' sources, or give --nccl-tests")
    build_dir = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
    return build_nccl_tests(Path(source), work / "nccl-tests", real_nccl_path(), build_dir, mpi), mpi is not None


def real_nccl_path() -> Path:
    from nccl_tests_build import real_nccl_library

    found = real_nccl_library()
    if found is None:
        raise SystemExit("no real libnccl.so.2 (torch's NCCL wheel or the CUDA toolkit's) to build against")
    return found


def in_turns(rounds: int, run, everyone: dict[str, object]) -> dict[str, list[dict]]:
    """Each side's rows, every side run `rounds` times in turns, each size's times the medians."""
    runs: dict[str, list] = {name: [] for name in everyone}
    for _ in range(rounds):
        for name, side in everyone.items():
            runs[name].append(run(side))
    return {name: merge_nccl_tests(results) for name, results in runs.items()}


def table(program: str, rows: dict[str, list[dict]]) -> str:
    """Markdown: per size each side's out-of-place time and wrong elements, and Loom's time over the
    fastest other side's (below 1: Loom ahead)."""
    names = list(rows)
    others = [name for name in names if name != "loom"]
    lines = [
        f"**{program}** (out of place, µs; wrong elements in brackets)",
        "",
        "| size | " + " | ".join(names) + " | Loom / best peer |",
        "|---:|" + "---:|" * (len(names) + 1),
    ]
    for i, first in enumerate(rows[names[0]]):
        cells = [f"{rows[name][i]['out_of_place_us']:.2f} ({rows[name][i]['out_of_place_wrong']})" for name in names]
        best = min(rows[name][i]["out_of_place_us"] for name in others) if others else float("nan")
        ratio = rows["loom"][i]["out_of_place_us"] / best if "loom" in rows and others else float("nan")
        lines.append(f"| {human(first['bytes'])} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    return "\n".join(lines)


def versions() -> dict[str, str]:
    found = {"date": datetime.date.today().isoformat()}
    queried = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    found["gpus"] = queried.stdout.strip()
    found["real_nccl"] = str(real_nccl_path())
    return found


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        real_nccl = real_nccl_path()
        binaries, mpi = build(args, work)
        everyone = sides(args, work, real_nccl)
        run_args = argparse.Namespace(
            nccl_tests=str(binaries), mpi=mpi, nproc=args.nproc, min_bytes=args.min_bytes, max_bytes=args.max_bytes
        )
        data = {**versions(), "nproc": args.nproc, "programs": {}}
        for program in [name for name in args.programs.split(",") if name]:
            rows = in_turns(args.rounds, lambda side, p=program: run_nccl_tests(run_args, side, p), everyone)
            data["programs"][program] = rows
            print(table(program, rows), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
