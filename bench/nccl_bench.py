"""libloom_nccl.so beside plain NCCL, in one run: a torch.distributed all-reduce (float32, sum, in place)
timed eagerly and replayed from a CUDA graph, with and without the library preloaded, and optionally
nccl-tests' all_reduce_perf the same two ways. Writes docs/perf/nccl.md (a table and a plot) and the
raw numbers as JSON:

    python bench/nccl_bench.py --nproc 2                                  # torch only
    python bench/nccl_bench.py --nproc 1 --nccl-tests ~/nccl-tests/build  # and nccl-tests (-g NPROC)
    python bench/nccl_bench.py --nproc 2 --nccl-tests DIR --mpi           # nccl-tests built with MPI=1

Each side runs under torchrun in its own processes (the library is put in front with LD_PRELOAD, so
the program is the same). The target (issue 13): never slower than NCCL at any size; a forwarded
call costs at most 0.3 us more than NCCL itself.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=1, help="ranks (GPUs) of the job")
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=1 << 30)
    parser.add_argument("--calls-per-graph", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--library", default="", help="libloom_nccl.so (default: loom nccl-path)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each side this many times, plain and preloaded in turns, and keep each size's median: a slow"
        " spell of the machine then falls on both sides alike",
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="also time the all-reduce on a group of the same ranks that torch makes with ncclCommSplit (the"
        " default group bound to the device), in the same processes: a split communicator must be as fast",
    )
    parser.add_argument("--nccl-tests", default="", help="folder with nccl-tests' all_reduce_perf (built)")
    parser.add_argument("--mpi", action="store_true", help="nccl-tests was built with MPI: mpirun -np NPROC, -g 1")
    parser.add_argument("--out", default=str(ROOT / "docs" / "perf" / "nccl.md"))
    parser.add_argument("--data", default=str(ROOT / "docs" / "perf" / "data" / "nccl.json"))
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)  # inside torchrun: write results here
    return parser.parse_args()


def sizes(args: argparse.Namespace) -> list[int]:
    out, size = [], args.min_bytes
    while size <= args.max_bytes:
        out.append(size)
        size *= 2
    return out


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT / "compiler"))
    from loom.tools.cuda_timing import time_graph

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    # Bound to the device, the default group makes its subgroups with ncclCommSplit.
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank) if args.split else None)
    groups = {"results": None}
    if args.split:
        groups["split_results"] = dist.new_group(list(range(dist.get_world_size())))
    # One short pass over every size first: the library's eager times on 2 x H100 fell from 36 to 22 us over
    # the first sizes of a fresh process (NCCL's did not), so without it the smallest sizes time a warm-up.
    for group in groups.values():
        for size in sizes(args):
            warm = torch.ones(size // 4, device="cuda")
            for _ in range(5):
                dist.all_reduce(warm, group=group)
    torch.cuda.synchronize()
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "nccl": ".".join(str(part) for part in torch.cuda.nccl.version()),
    }
    for key, group in groups.items():
        report[key] = time_all_reduce(args, group, time_graph)
    if dist.get_rank() == 0:
        Path(args.worker).write_text(json.dumps(report))
    dist.destroy_process_group()


def time_all_reduce(args: argparse.Namespace, group: object, time_graph) -> list[dict]:
    """Median microseconds per in-place float32 all-reduce on `group` at each size, eager and graph-replayed."""
    import torch
    import torch.distributed as dist

    results = []
    for size in sizes(args):
        tensor = torch.ones(size // 4, device="cuda")
        calls = max(5, min(200, (256 << 20) // size))
        for _ in range(5):
            dist.all_reduce(tensor, group=group)
        samples = []
        for _ in range(args.repeats):
            dist.barrier()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                dist.all_reduce(tensor, group=group)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000 / calls)
        eager = statistics.median(samples)
        graph = time_graph(
            lambda t=tensor: dist.all_reduce(t, group=group), args.calls_per_graph, args.repeats, dist.barrier
        )
        results.append({"bytes": size, "eager_us": eager, "graph_us": graph})
    return results


class Side:
    """The environment of one side's ranks: plain NCCL, or the library preloaded, with the bundled plans
    installed into a cache of this run's own (as `loom install-plans` puts them; a fresh machine has none,
    and the library then forwards every call) and its INFO log, one line per kind of call and what ran
    it, written to files that `check_routes` reads after the run."""

    def __init__(self, library: str, preload: bool, work: Path) -> None:
        self.preload = preload
        self.logs = work / ("loom_logs" if preload else "nccl_logs")
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = {"NCCL_NVLS_ENABLE": "0", "LOOM_CACHE_DIR": str(work / "cache")}
        if preload:
            self.env.update(
                {
                    "LD_PRELOAD": library,
                    "LOOM_NCCL_DEBUG": "INFO",
                    "LOOM_NCCL_DEBUG_FILE": str(self.logs / "loom.%h.%p.log"),
                }
            )

    def check_routes(self, program: str) -> None:
        """Raises unless the library ran: loaded, with plans, and no float32 all-reduce forwarded to NCCL
        (the numbers would then compare NCCL with itself)."""
        if not self.preload:
            return
        logs = sorted(self.logs.glob("*.log"))
        lines = [line for log in logs for line in log.read_text().splitlines()]
        for log in logs:  # the next run's check reads only its own
            log.unlink()
        if not any("ncclCommInitRank" in line for line in lines):
            raise SystemExit(f"{program}: the preloaded library logged nothing: was it loaded (LD_PRELOAD)?")
        off = [line for line in lines if "Loom off" in line or "no Loom plans are registered" in line]
        forwarded = [
            line for line in lines if "AllReduce" in line and "float32" in line and "forwarded to NCCL" in line
        ]
        if off or forwarded:
            raise SystemExit(f"{program}: the library did not run Loom:\n" + "\n".join((off + forwarded)[:8]))


def install_plans(work: Path) -> None:
    subprocess.run([sys.executable, "-m", "loom", "install-plans", "--cache-dir", str(work / "cache")], check=True)


def run_torch(args: argparse.Namespace, side: Side) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "results.json"
        env = {**os.environ, **side.env}
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}"]
        command += [
            __file__,
            "--worker",
            str(out),
            "--min-bytes",
            str(args.min_bytes),
            "--max-bytes",
            str(args.max_bytes),
        ]
        command += ["--calls-per-graph", str(args.calls_per_graph), "--repeats", str(args.repeats)]
        command += ["--split"] if args.split else []
        subprocess.run(command, check=True, env=env, timeout=3600)
        side.check_routes("torch")
        return json.loads(out.read_text())


def run_nccl_tests(args: argparse.Namespace, side: Side, name: str = "all_reduce_perf") -> list[dict]:
    """One run of nccl-tests' program `name` (from args.nccl_tests) on `side`: its result rows."""
    program = Path(args.nccl_tests) / name
    env = {**os.environ, **side.env}
    command = [str(program), "-b", str(args.min_bytes), "-e", str(args.max_bytes), "-f", "2", "-c", "1"]
    if args.mpi:
        sys.path.insert(0, str(ROOT / "tests" / "nccl"))
        from nccl_tests_build import mpirun_command

        command = [*mpirun_command(args.nproc, side.env), *command, "-g", "1"]
        env = dict(os.environ)  # the preload goes to the ranks only, not to mpirun
    else:
        command += ["-g", str(args.nproc)]
    output = subprocess.run(command, check=True, env=env, capture_output=True, text=True, timeout=3600).stdout
    side.check_routes("nccl-tests")
    return nccl_tests_rows(output)


def nccl_tests_rows(output: str) -> list[dict]:
    """nccl-tests' result rows: bytes, and per side of the table (out of place, in place) the time and the
    wrong elements it counted (N/A where it checks nothing)."""
    rows = []
    for line in output.splitlines():
        fields = line.split()
        # size count type redop root | time algbw busbw #wrong (out of place) | the same in place
        if len(fields) >= 13 and re.fullmatch(r"\d+", fields[0]):
            rows.append(
                {
                    "bytes": int(fields[0]),
                    "out_of_place_us": float(fields[5]),
                    "out_of_place_wrong": fields[8],
                    "in_place_us": float(fields[9]),
                    "in_place_wrong": fields[12],
                }
            )
    return rows


def in_turns(rounds: int, run, plain: Side, preloaded: Side, merge) -> dict:
    """{"nccl": ..., "loom": ...}: `run` of each side `rounds` times, the sides in turns, merged by `merge`."""
    runs = {"nccl": [], "loom": []}
    for _ in range(rounds):
        runs["nccl"].append(run(plain))
        runs["loom"].append(run(preloaded))
    return {side: merge(results) for side, results in runs.items()}


def merge_torch(runs: list[dict]) -> dict:
    """One torch run's form, each size's times the medians over the runs (each run's own kept beside them,
    so that a spread or a trend across the runs can be read from the data)."""
    merged = dict(runs[0])
    for key in ("results", "split_results"):
        if key not in runs[0]:
            continue
        merged[key] = [
            {
                "bytes": first["bytes"],
                "eager_us": statistics.median(run[key][i]["eager_us"] for run in runs),
                "graph_us": statistics.median(run[key][i]["graph_us"] for run in runs),
                "eager_us_per_run": [run[key][i]["eager_us"] for run in runs],
                "graph_us_per_run": [run[key][i]["graph_us"] for run in runs],
            }
            for i, first in enumerate(runs[0][key])
        ]
    return merged


def merge_nccl_tests(runs: list[list[dict]]) -> list[dict]:
    """nccl-tests' rows, times the medians over the runs, wrong elements the most any run found."""

    def most_wrong(values: list[str]) -> str:
        numbers = [int(value) for value in values if value.isdigit()]
        return str(max(numbers)) if len(numbers) == len(values) else "/".join(sorted(set(values)))

    return [
        {
            "bytes": first["bytes"],
            "out_of_place_us": statistics.median(run[i]["out_of_place_us"] for run in runs),
            "out_of_place_wrong": most_wrong([run[i]["out_of_place_wrong"] for run in runs]),
            "in_place_us": statistics.median(run[i]["in_place_us"] for run in runs),
            "in_place_wrong": most_wrong([run[i]["in_place_wrong"] for run in runs]),
        }
        for i, first in enumerate(runs[0])
    ]


def human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}"
        size //= 1024
    return str(size)


def write_report(args: argparse.Namespace, data: dict) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plain, loom = data["torch"]["nccl"], data["torch"]["loom"]
    lines = [
        "# libloom_nccl.so beside NCCL",
        "",
        f"`python bench/nccl_bench.py --nproc {args.nproc}` on {data['date']}: {args.nproc} x {plain['device']},"
        f" torch {plain['torch']}, NCCL {plain['nccl']}. torch.distributed all-reduce, float32, sum, in place;"
        " median microseconds per call (eager: back-to-back calls; graph: calls replayed from one CUDA graph)"
        + (f"; each side run {data['rounds']} times, in turns with the other, medians" if data["rounds"] > 1 else "")
        + ".",
        "Ratio: NCCL's time over the preloaded library's (above 1: the library is faster).",
        "",
        "| size | NCCL eager | Loom eager | ratio | NCCL graph | Loom graph | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for a, b in zip(plain["results"], loom["results"], strict=True):
        lines.append(
            f"| {human(a['bytes'])} | {a['eager_us']:.2f} | {b['eager_us']:.2f} | {a['eager_us'] / b['eager_us']:.2f} |"
            f" {a['graph_us']:.2f} | {b['graph_us']:.2f} | {a['graph_us'] / b['graph_us']:.2f} |"
        )
    if "split_results" in loom:
        lines += [
            "",
            "The same all-reduce on a group of the same ranks made by ncclCommSplit (`dist.new_group` with the default"
            " group bound to the device), in the same processes; graph-replayed and eager microseconds, and the split"
            " group's time over the default group's under the library (1.00: as fast):",
            "",
            "| size | NCCL split graph | Loom split graph | Loom split / default | NCCL split eager"
            " | Loom split eager |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        rows = zip(plain["split_results"], loom["split_results"], loom["results"], strict=True)
        for a, b, default in rows:
            lines.append(
                f"| {human(a['bytes'])} | {a['graph_us']:.2f} | {b['graph_us']:.2f} |"
                f" {b['graph_us'] / default['graph_us']:.2f} | {a['eager_us']:.2f} | {b['eager_us']:.2f} |"
            )
    if data.get("nccl_tests"):
        lines += [
            "",
            f"nccl-tests `{'mpirun -np ' + str(args.nproc) + ' ' if args.mpi else ''}all_reduce_perf"
            f" -g {1 if args.mpi else args.nproc} -c 1`: microseconds out of place / in place, and"
            " the elements its check found wrong:",
            "",
            "| size | NCCL | Loom | wrong (Loom) |",
            "|---:|---:|---:|---:|",
        ]
        for a, b in zip(data["nccl_tests"]["nccl"], data["nccl_tests"]["loom"], strict=True):
            lines.append(
                f"| {human(a['bytes'])} | {a['out_of_place_us']:.2f} / {a['in_place_us']:.2f} |"
                f" {b['out_of_place_us']:.2f} / {b['in_place_us']:.2f} |"
                f" {b['out_of_place_wrong']} / {b['in_place_wrong']} |"
            )
    lines += ["", "![all-reduce latency](nccl.png)", ""]
    out.write_text("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for axis, key, title in ((axes[0], "eager_us", "eager"), (axes[1], "graph_us", "CUDA graph replay")):
        for name, run in (("NCCL", plain), ("libloom_nccl.so", loom)):
            axis.plot([r["bytes"] for r in run["results"]], [r[key] for r in run["results"]], marker="o", label=name)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("message bytes")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("microseconds per all-reduce")
    axes[0].legend()
    figure.suptitle(f"torch.distributed all-reduce, {args.nproc} x {plain['device']}")
    figure.tight_layout()
    figure.savefig(out.with_suffix(".png"), dpi=120)


def main() -> None:
    args = arguments()
    if args.worker:
        worker(args)
        return
    library = args.library
    if not library:
        sys.path.insert(0, str(ROOT / "compiler"))
        from loom.runtime.nccl import nccl_library_path

        library = str(nccl_library_path())
    library = str(Path(library).resolve())  # the ranks may start elsewhere
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        install_plans(work)
        plain, preloaded = Side(library, False, work), Side(library, True, work)
        data = {"date": datetime.date.today().isoformat(), "nproc": args.nproc, "rounds": args.rounds}
        data["torch"] = in_turns(args.rounds, lambda side: run_torch(args, side), plain, preloaded, merge_torch)
        if args.nccl_tests:
            data["nccl_tests"] = in_turns(
                args.rounds, lambda side: run_nccl_tests(args, side), plain, preloaded, merge_nccl_tests
            )
    Path(args.data).parent.mkdir(parents=True, exist_ok=True)
    Path(args.data).write_text(json.dumps(data, indent=1))
    write_report(args, data)
    print(f"wrote {args.out} and {args.data}")


if __name__ == "__main__":
    main()
