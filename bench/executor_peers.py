"""Loom's executor beside MSCCL++'s on the same MSCCL++ execution plans (issue 40): interpreter against
interpreter. For every plan and size, MSCCL++'s own driver (``executor_test``, built by
scripts/mscclpp_build.sh, one MPI process per GPU) runs the plan file, and Loom runs the plan ``loom import``
makes of the same file (one process per GPU under loom.launch). Both are timed the way executor_test times:
``--calls`` float16 all-reduces in place captured into one CUDA graph, the graph replayed ``--replays`` times
back to back, the host's time over the replays divided by every call. The two sides take turns, ``--rounds``
times, and the medians are kept. Loom's output is first checked against the float64 sum of every rank's
fresh random input.

    python bench/executor_peers.py --nproc 2 --executor-test build-mscclpp/build/test/executor_test \\
        --plans build-mscclpp/src/test/execution-files/allreduce.json --out executor_peers.json

Without --executor-test only Loom's side runs. ``--worker`` is the per-rank part, started by the driver.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
# executor_test prints one line per rank: "Rank 0: 1048576 bytes 12.3456 us".
RESULT_LINE = re.compile(r"^Rank (\d+): (\d+) bytes ([0-9.eE+-]+) us$", re.MULTILINE)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", default="", help="MSCCL++ execution plan files, comma-separated")
    parser.add_argument("--executor-test", default="", help="MSCCL++'s executor_test (else Loom's side only)")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--sizes", default="1024,16384,262144,1048576,4194304,16777216,67108864,268435456")
    parser.add_argument("--calls", type=int, default=20, help="calls captured into one graph")
    parser.add_argument("--replays", type=int, default=10, help="replays of the graph per timing")
    parser.add_argument("--rounds", type=int, default=3, help="turns of both sides; medians are kept")
    parser.add_argument("--timeout", type=int, default=300, help="seconds for one side's run of one plan")
    parser.add_argument("--out", default="")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)  # a Loom plan file: run as a rank
    parser.add_argument("--json", default="", help=argparse.SUPPRESS)  # where the worker's rank 0 writes
    return parser.parse_args(argv)


def sizes_of(args: argparse.Namespace) -> list[int]:
    return [int(size) for size in args.sizes.split(",") if size]


def parse_executor_test(output: str) -> float:
    """Microseconds per call from executor_test's output: the slowest rank's (a call ends when every rank's
    part of it has)."""
    times = [float(found[3]) for found in RESULT_LINE.finditer(output)]
    if not times:
        raise RuntimeError(f"executor_test printed no result line:\n{output[-2000:]}")
    return max(times)


def run_mscclpp(args: argparse.Namespace, plan: str, size: int) -> float:
    sys.path.insert(0, str(ROOT / "tests" / "nccl"))
    from nccl_tests_build import mpirun_command

    command = [*mpirun_command(args.nproc, {}), args.executor_test, str(size), plan, str(args.calls), str(args.replays)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return parse_executor_test(done.stdout)


def run_loom(args: argparse.Namespace, loom_plan: Path, scratch: Path) -> dict[int, dict]:
    """Loom's side for one plan, every size in one launch: size -> {"us", "error"}."""
    report = scratch / f"{loom_plan.stem}.result.json"
    command = [sys.executable, "-m", "loom.launch", "-n", str(args.nproc), "--timeout", str(args.timeout)]
    command += [__file__, "--worker", str(loom_plan), "--json", str(report), "--sizes", args.sizes]
    command += ["--calls", str(args.calls), "--replays", str(args.replays)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout + 30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Loom's run of {loom_plan.name} failed ({done.returncode}):\n{done.stdout[-3000:]}")
    return {int(size): row for size, row in json.loads(report.read_text()).items()}


def drive(args: argparse.Namespace) -> list[dict]:
    from loom.interop import import_mscclpp_file

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        for plan in (path for path in args.plans.split(",") if path):
            ranks = len(json.loads(Path(plan).read_text()).get("gpus", []))
            if ranks != args.nproc:
                print(f"{Path(plan).name}: skipped, a plan of {ranks} ranks (--nproc {args.nproc})", flush=True)
                continue
            loom_plan = scratch / (Path(plan).stem + ".loom.json")
            loom_plan.write_text(import_mscclpp_file(plan))  # verified here, once
            samples: dict[str, dict[int, list[float]]] = {"loom": {}, "mscclpp": {}}
            errors: dict[int, float] = {}
            for round_index in range(args.rounds):
                for size, row in run_loom(args, loom_plan, scratch).items():
                    samples["loom"].setdefault(size, []).append(row["us"])
                    errors[size] = max(errors.get(size, 0.0), row["error"])
                if args.executor_test:
                    for size in sizes_of(args):
                        samples["mscclpp"].setdefault(size, []).append(run_mscclpp(args, plan, size))
                print(f"{Path(plan).name}: round {round_index + 1} of {args.rounds} done", flush=True)
            for size in sizes_of(args):
                row = {"plan": Path(plan).name, "bytes": size, "loom_us": median(samples["loom"][size])}
                row["loom_relative_error"] = errors[size]
                if args.executor_test:
                    row["mscclpp_us"] = median(samples["mscclpp"][size])
                    row["loom_over_mscclpp"] = row["loom_us"] / row["mscclpp_us"]
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def worker(args: argparse.Namespace) -> None:
    """One rank: Loom runs the imported plan at every size; rank 0 writes {size: {"us", "error"}}."""
    import loom
    import torch
    from loom import _native

    bootstrap = _native.Bootstrap.from_environment()
    rank, world = bootstrap.rank, bootstrap.world_size
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    executor = loom.Executor(
        _native.Communicator(bootstrap), verified=False
    )  # plans proven where built: this checks the GPU executor
    plan = _native.Plan.load(args.worker)
    results = {}
    for size in sizes_of(args):
        numel = size // 2
        # Correct first: every rank's fresh random input, summed in float64.
        inputs = [torch.randn(numel, generator=torch.Generator().manual_seed(size + r)).half() for r in range(world)]
        data = inputs[rank].cuda()
        executor.execute(plan, data, data)
        torch.cuda.synchronize()
        exact = torch.stack([x.double() for x in inputs]).sum(0)
        scale = torch.stack([x.double().abs() for x in inputs]).sum(0) + 1e-30
        error = float(((data.cpu().double() - exact).abs() / scale).max())
        if error > 2.0**-10 * (world + 2):
            raise RuntimeError(f"{plan.name} at {size} B: relative error {error:.3g} against float64")
        # Then timed as executor_test times: zeros, so that repeated in-place sums stay finite.
        data.zero_()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                executor.execute(plan, data, data)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(args.calls):
                executor.execute(plan, data, data)
        graph.replay()
        torch.cuda.synchronize()
        bootstrap.barrier()
        started = time.perf_counter()
        for _ in range(args.replays):
            graph.replay()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - started
        results[size] = {"us": elapsed * 1e6 / (args.calls * args.replays), "error": error}
        del graph
    bootstrap.barrier()
    if rank == 0:
        Path(args.json).write_text(json.dumps(results))


def main() -> None:
    args = arguments()
    if args.worker:
        worker(args)
        return
    rows = drive(args)
    if args.out:
        import torch

        report = {
            "date": datetime.date.today().isoformat(),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "",
            "world_size": args.nproc,
            "calls": args.calls,
            "replays": args.replays,
            "rounds": args.rounds,
            "results": rows,
        }
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
