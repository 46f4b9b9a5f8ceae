"""``loom demo``: the whole user path in one command, on every visible GPU (or the CPU backend).

1. **Compile** a DSL algorithm (``loom/tools/demo_allreduce.py``, a one-shot packet all-reduce written as a
   user would) with ``loom.compile``, which caches the plan under ``<cache root>/jit``.
2. **Verify** the plan with the symbolic verifier (``loom.verify``): it computes an all-reduce, without
   races, deadlocks or out-of-bounds accesses, over three consecutive calls.
3. **Register** it with ``loom.register_plan`` and install a selector (:func:`demo_selector`) that
   takes it for every all-reduce it fits and the best bundled plan for everything else.
4. **Run** all-reduce and all-gather through ``loom.Communicator`` over all visible GPUs, one process
   per GPU (``loom.launch``), check each result against a float64 reference on fresh random data, and
   time Loom and NCCL (``torch.distributed``) in the same processes by CUDA graph replay and, eagerly,
   by the host's wall clock per call (what a job without graphs pays).

With one GPU, the collectives run with 2 and then 4 ranks sharing it (threads of one process, each on its
own stream: docs/testing.md), timed by CUDA events over eager calls; those are kernel costs on one GPU,
not NVLink, and NCCL cannot share a GPU between ranks, so it is not beside them. Then world size 1 runs
beside NCCL's world size 1 (graph replay). Without a GPU, or without torch, the same flow runs on the CPU
backend with 4 ranks on host threads of this process (wall-clock times, no NCCL), and the demo says so.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEMO_ALGORITHM = Path(__file__).resolve().parent / "demo_allreduce.py"
DEMO_PLAN_PREFIX = "demo_allreduce_packets"
CPU_RANKS = 4
SHARED_GPU_RANKS = (2, 4)  # the one-GPU demo's jobs of ranks sharing the GPU
COLLECTIVES = ("allreduce", "allgather")
TITLES = {"allreduce": "all-reduce", "allgather": "all-gather"}
GPU_SIZES = "1K,16K,256K,4M,64M"
CPU_SIZES = "1K,16K,256K"
# Ranks sharing one GPU run only plans whose blocks all fit on it at once: the selector passes over those
# that do not (bundled plans tuned on GPUs of their own), and the JIT compiles fewer instances where none fits.
ONE_GPU_SIZES = GPU_SIZES
TOLERANCE = 1e-4  # float32 sums of a few standard-normal values against float64


def demo_selector(request: object) -> object:
    """The demo's plan for every all-reduce it fits; for anything else the best fitting plan (the
    candidates come best first: user plans, then bundled ones, narrowest size range first)."""
    for candidate in request.candidates:
        if candidate.name.startswith(DEMO_PLAN_PREFIX):
            return candidate
    return request.candidates[0] if request.candidates else None


def parse_size(text: str) -> int:
    """``1K`` = 1024 bytes, ``4M``, ``1G``, or plain bytes; a whole number of float32 elements."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = units.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in units else text
    if not digits.isdigit() or int(digits) == 0 or int(digits) * scale % 4:
        raise argparse.ArgumentTypeError(f"sizes: {text!r} is not a positive multiple of 4 bytes (1K, 4M, 4096)")
    return int(digits) * scale


def size_text(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


# ---- The parent: steps 1-3 and the table ---------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """``loom demo``: returns the exit status (0 when every result matched its reference)."""
    gpus, why_not = _usable_gpus(args)
    if gpus == 1:
        print(
            "loom demo: 1 GPU: 2 and 4 ranks sharing it as threads of one process (kernel costs on one GPU, not"
            " NVLink), then world size 1 beside NCCL's"
        )
        worlds = SHARED_GPU_RANKS
    else:
        worlds = (gpus if gpus else CPU_RANKS,)
        where = f"{gpus} GPUs, one process each" if gpus else f"CPU backend, {worlds[0]} ranks ({why_not})"
        print(f"loom demo: {where}")
    plans = {world: _compile_and_verify(world) for world in worlds}
    if any(plan is None for plan in plans.values()):
        return 1
    from loom.runtime.install_plans import ensure_default_plans_installed

    ensure_default_plans_installed()
    default_sizes = ONE_GPU_SIZES if gpus == 1 else GPU_SIZES if gpus else CPU_SIZES
    sizes = [parse_size(s) for s in (args.sizes or default_sizes).split(",")]
    for plan in plans.values():
        print(
            f"3. register  {plan.name} as a user plan (all-reduce up to {size_text(_max_bytes(plan))}, in place), "
            "with demo_selector: it takes that plan where it fits and the best bundled plan elsewhere"
        )
    paths = {world: str(plan.path) for world, plan in plans.items()}
    if gpus == 1:
        blocks = _run_on_one_gpu(paths, sizes, args)
    elif gpus:
        blocks = _run_on_gpus(paths[gpus], gpus, sizes, args)
    else:
        blocks = _run_on_cpu(paths[worlds[0]], worlds[0], sizes, args.repeats)
    if blocks is None:
        return 1
    rows = []
    for block in blocks:
        _print_table(block)
        rows += block["rows"]
    failures = [row for row in rows if not row["matches"]]
    for row in failures:
        print(f"FAIL {TITLES[row['collective']]} {size_text(row['bytes'])}: max error {row['max_error']:.3g}")
    verdict = "FAILED" if failures else "ok"
    print(f"{verdict}: {len(rows) - len(failures)} of {len(rows)} results matched the float64 reference")
    return 1 if failures else 0


def _usable_gpus(args: argparse.Namespace) -> tuple[int, str]:
    """How many GPUs to run on (0: the CPU backend), and why not GPUs when 0."""
    if args.cpu:
        return 0, "asked for with --cpu"
    try:
        import torch
    except ImportError:
        return 0, "torch is not installed: the GPU run needs it for tensors and for NCCL"
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    wanted = args.gpus or visible
    if visible == 0:
        return 0, "no GPU visible"
    if wanted == 1:
        return 1, ""
    if wanted > visible:
        raise SystemExit(f"loom demo: --gpus {wanted}, but only {visible} GPUs are visible")
    return wanted, ""


def _compile_and_verify(ranks: int):
    import loom
    from loom.verify import verify

    started = time.perf_counter()
    plan = loom.compile(DEMO_ALGORITHM, {"world_size": ranks, "verify": False})
    how = "read back from the JIT cache" if plan.from_cache else "compiled"
    print(f"1. compile   {DEMO_ALGORITHM.name} for {ranks} ranks: {how} in {time.perf_counter() - started:.2f} s")
    print(f"             -> {plan.path}")
    started = time.perf_counter()
    findings = verify(plan.path)
    if findings:
        print(f"2. verify    {plan.name}: {len(findings)} findings")
        for finding in findings[:10]:
            print(f"             {finding}")
        return None
    print(
        f"2. verify    {plan.name}: computes the all-reduce, no races, deadlocks or out-of-bounds accesses"
        f" over 3 calls ({time.perf_counter() - started:.2f} s)"
    )
    return plan


def _max_bytes(plan) -> int:
    return json.loads(plan.text)["max_message_bytes"]


def _register(plan_path: str) -> None:
    import loom

    loom.register_plan(plan_path, tags=["demo"], replace=True)
    loom.set_selector(demo_selector)


def _print_table(results: dict) -> None:
    print(f"4. run       {results['setup']}")
    print(f"             {results['timing']}")
    with_nccl = all("nccl_us" in row for row in results["rows"])
    with_eager = all("nccl_eager_us" in row for row in results["rows"])
    header = ["collective", "size", "plan", "Loom µs", "Loom GB/s"]
    header += ["NCCL µs", "NCCL GB/s", "Loom vs NCCL"] if with_nccl else []
    header += ["eager Loom µs", "eager NCCL µs"] if with_eager else []
    lines = [header]
    for row in results["rows"]:
        line = [TITLES[row["collective"]], size_text(row["bytes"]), row["plan"]]
        line += [f"{row['loom_us']:.1f}", f"{row['loom_busbw_gbs']:.2f}"]
        if with_nccl:
            ratio = row["nccl_us"] / row["loom_us"]
            line += [f"{row['nccl_us']:.1f}", f"{row['nccl_busbw_gbs']:.2f}"]
            line += [f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"]
        if with_eager:
            line += [f"{row['loom_eager_us']:.1f}", f"{row['nccl_eager_us']:.1f}"]
        lines.append(line)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    print("  GB/s is bus bandwidth (nccl-tests' definition); sizes are each rank's input.")


# ---- Step 4 on the CPU backend: ranks on threads of this process -----------------------------------


def _run_on_cpu(plan_path: str, ranks: int, sizes: list[int], repeats: int) -> list[dict] | None:
    import numpy as np

    from loom.runtime.communicator import Communicator
    from loom.runtime.host_ranks import run_ranks

    _register(str(plan_path))  # one registry per process: the rank threads share it

    def body(bootstrap):
        comm = Communicator(bootstrap, host_only=True)

        def time_call(call: Callable[[], object]) -> float:
            samples = []
            for _ in range(repeats):
                bootstrap.barrier()
                started = time.perf_counter()
                call()
                samples.append((time.perf_counter() - started) * 1e6)
            return statistics.median(samples)

        def inputs(seed: int, count: int) -> list:
            return [np.random.default_rng([seed, r]).standard_normal(count).astype(np.float32) for r in range(ranks)]

        arrays = Arrays(
            inputs=inputs,
            zeros=lambda count: np.zeros(count, np.float32),
            copy=np.copy,
            as_float64=lambda x: x.astype(np.float64),
            concatenate=np.concatenate,
            time_call=time_call,
        )
        return _measure(comm, sizes, arrays)

    outcomes = run_ranks(ranks, None, body, timeout_ms=60000, join_timeout_s=600)
    for rank, outcome in outcomes.items():
        if isinstance(outcome, BaseException):
            print(f"loom demo: rank {rank} failed: {outcome}", file=sys.stderr)
            return None
    return [
        {
            "setup": f"CPU backend: {ranks} ranks on host threads of one process (no GPU, so no NCCL beside it)",
            "timing": f"wall-clock time per call, median of {repeats}",
            "rows": outcomes[0],
        }
    ]


# ---- Step 4 on GPUs: one process per GPU under loom.launch ---------------------------------------


def _run_on_gpus(plan_path: str, gpus: int, sizes: list[int], args: argparse.Namespace) -> list[dict] | None:
    from loom.launch import launch

    with tempfile.TemporaryDirectory(prefix="loom-demo-") as folder:
        results = Path(folder) / "results.json"
        command = [
            sys.executable,
            "-m",
            "loom.tools.demo",
            "--worker",
            "--plan",
            str(plan_path),
            "--results",
            str(results),
        ]
        command += ["--sizes", ",".join(map(str, sizes)), "--calls", str(args.calls), "--repeats", str(args.repeats)]
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        status = launch(command, gpus, timeout_s=args.timeout, env=env)
        if status != 0 or not results.exists():
            print(f"loom demo: the GPU run failed (exit status {status}); its ranks' output is above", file=sys.stderr)
            return None
        return [json.loads(results.read_text())]


# ---- Step 4 on one GPU: ranks sharing it, then world size 1 beside NCCL --------------------------------


def _run_on_one_gpu(plans: dict[int, str], sizes: list[int], args: argparse.Namespace) -> list[dict] | None:
    """In a process of its own: ranks sharing a GPU need CUDA_DEVICE_MAX_CONNECTIONS before CUDA starts."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="loom-demo-") as folder:
        results = Path(folder) / "results.json"
        command = [sys.executable, "-m", "loom.tools.demo", "--one-gpu", "--plans", json.dumps(plans)]
        command += ["--results", str(results), "--sizes", ",".join(map(str, sizes))]
        command += ["--calls", str(args.calls), "--repeats", str(args.repeats)]
        env = {**os.environ, "LOOM_SHARE_GPU": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "32", "CUDA_MODULE_LOADING": "EAGER"}
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0", "WORLD_SIZE": "1"})
        try:
            done = subprocess.run(command, env=env, timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"loom demo: the one-GPU run took longer than {args.timeout:g} s and was stopped", file=sys.stderr)
            return None
        if done.returncode != 0 or not results.exists():
            print(f"loom demo: the one-GPU run failed (exit status {done.returncode})", file=sys.stderr)
            return None
        return json.loads(results.read_text())


def _one_gpu_worker(args: argparse.Namespace) -> int:
    """``python -m loom.tools.demo --one-gpu``: the jobs of ranks sharing GPU 0, then world size 1 beside NCCL."""
    import torch

    from loom.runtime.communicator import Communicator
    from loom.runtime.host_ranks import run_ranks
    from loom.tools.cuda_timing import time_stream

    torch.cuda.set_device(0)
    device = torch.cuda.get_device_name()
    sizes = [int(size) for size in args.sizes.split(",")]
    blocks = []
    for world, plan in sorted(json.loads(args.plans).items(), key=lambda item: int(item[0])):
        _register(plan)  # one registry per process: the rank threads share it

        def body(bootstrap):
            torch.cuda.set_device(0)
            with torch.cuda.stream(torch.cuda.Stream()):  # each rank its own stream
                comm = Communicator(bootstrap)
                timer = lambda call: time_stream(call, args.calls, args.repeats, bootstrap.barrier)  # noqa: E731
                return _measure(comm, sizes, _torch_arrays(comm.world_size, timer))

        outcomes = run_ranks(int(world), None, body, timeout_ms=60000, join_timeout_s=args.timeout)
        for rank, outcome in outcomes.items():
            if isinstance(outcome, BaseException):
                print(f"loom demo: rank {rank} of {world} sharing the GPU failed: {outcome}", file=sys.stderr)
                return 1
        blocks.append(
            {
                "setup": f"{world} ranks sharing one {device} (threads of one process, a stream each): kernel costs"
                " on one GPU and each rank's launch from a Python thread, not NVLink; NCCL cannot share a GPU"
                " between ranks, so it is not beside them",
                "timing": f"CUDA events around {args.calls} eager calls, median of {args.repeats}",
                "rows": outcomes[0],
            }
        )
    blocks.append(_world_size_one(device, sizes, args))
    Path(args.results).write_text(json.dumps(blocks))
    return 0


def _world_size_one(device: str, sizes: list[int], args: argparse.Namespace) -> dict:
    """A job of one rank (a copy, or nothing in place) beside NCCL's, by graph replay."""
    import torch
    import torch.distributed as dist

    from loom import _native
    from loom.runtime.communicator import Communicator
    from loom.tools.cuda_timing import time_graph

    bootstrap = _native.Bootstrap(0, 1, _native.UniqueId.create("127.0.0.1"))
    comm = Communicator(bootstrap)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    nccl = {"allreduce": lambda out, inp: lambda: dist.all_reduce(out)}
    nccl["allgather"] = lambda out, inp: lambda: dist.all_gather_into_tensor(out, inp)
    timer = lambda call: time_graph(call, args.calls, args.repeats, lambda: None)  # noqa: E731
    arrays = _torch_arrays(1, timer, nccl=lambda collective, out, inp: nccl[collective](out, inp))
    with warnings.catch_warnings():  # an in-place call of one rank captures nothing, as in NCCL
        warnings.filterwarnings("ignore", message="The CUDA Graph is empty")
        rows = _measure(comm, sizes, arrays)
    dist.destroy_process_group()
    return {
        "setup": f"world size 1 on one {device}: Loom's copy (or nothing, in place) beside NCCL"
        f" {'.'.join(map(str, torch.cuda.nccl.version()))} through torch {torch.__version__}",
        "timing": f"CUDA graph replay of {args.calls} calls, median of {args.repeats} replays",
        "rows": rows,
    }


def _torch_arrays(world: int, time_call, nccl=None) -> Arrays:
    """Step 4's arrays as CUDA tensors; inputs drawn on the host (a CUDA generator cannot be made while
    another rank sharing the GPU captures a graph)."""
    import torch

    def inputs(seed: int, count: int) -> list:
        generator = torch.Generator()
        return [torch.randn(count, generator=generator.manual_seed(seed * 1000 + r)).cuda() for r in range(world)]

    return Arrays(
        inputs=inputs,
        zeros=lambda count: torch.zeros(count, device="cuda"),
        copy=torch.clone,
        as_float64=lambda x: x.to(torch.float64),
        concatenate=torch.cat,
        time_call=time_call,
        nccl=nccl,
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _worker(args: argparse.Namespace) -> int:
    """One rank of the GPU run (``python -m loom.tools.demo --worker``, started by ``loom demo``)."""
    import torch
    import torch.distributed as dist

    from loom.runtime.communicator import Communicator
    from loom.tools.cuda_timing import time_eager, time_graph

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)  # as with NCCL: the communicator takes the current device
    comm = Communicator()
    dist.init_process_group("nccl", rank=comm.rank, world_size=comm.world_size, device_id=torch.device("cuda", local))
    _register(args.plan)
    world = comm.world_size

    def inputs(seed: int, count: int) -> list:
        generator = torch.Generator(device="cuda")
        return [
            torch.randn(count, generator=generator.manual_seed(seed * 1000 + r), device="cuda") for r in range(world)
        ]

    def nccl(collective: str, output, input) -> Callable[[], object]:
        if collective == "allreduce":
            return lambda: dist.all_reduce(output)
        return lambda: dist.all_gather_into_tensor(output, input)

    arrays = Arrays(
        inputs=inputs,
        zeros=lambda count: torch.zeros(count, device="cuda"),
        copy=torch.clone,
        as_float64=lambda x: x.to(torch.float64),
        concatenate=torch.cat,
        time_call=lambda call: time_graph(call, args.calls, args.repeats, dist.barrier),
        nccl=nccl,
        time_eager=lambda call: time_eager(call, args.calls, args.repeats, dist.barrier),
    )
    rows = _measure(comm, [int(size) for size in args.sizes.split(",")], arrays)
    if comm.rank == 0:
        setup = (
            f"{world} x {torch.cuda.get_device_name()}, one process each; NCCL"
            f" {'.'.join(map(str, torch.cuda.nccl.version()))} through torch {torch.__version__}"
            f" (NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE', 'unset')})"
        )
        timing = (
            f"CUDA graph replay of {args.calls} calls, median of {args.repeats} replays, same processes for both;"
            f" eager: host wall time per call over {args.calls} eager calls (reused tensors), median of {args.repeats}"
        )
        Path(args.results).write_text(json.dumps({"setup": setup, "timing": timing, "rows": rows}))
    dist.destroy_process_group()
    return 0


# ---- Step 4, common to both: check against float64, then time ----------------------------------


@dataclass(frozen=True)
class Arrays:
    """What step 4 needs from numpy (CPU) or torch (GPU), and how it times a call."""

    inputs: Callable[[int, int], list]  # (seed, count): every rank's input, the same on every rank
    zeros: Callable[[int], object]
    copy: Callable[[object], object]
    as_float64: Callable[[object], object]
    concatenate: Callable[[list], object]
    time_call: Callable[[Callable[[], object]], float]  # microseconds per call
    nccl: Callable[[str, object, object], Callable[[], object]] | None = None  # the same call through NCCL
    time_eager: Callable[[Callable[[], object]], float] | None = None  # host microseconds per eager call


def _measure(comm, sizes: list[int], arrays: Arrays) -> list[dict]:
    """Each collective at each size: one checked call on fresh random data, then timed calls of Loom
    (and NCCL when there is one) on zeros, so that repeated in-place sums cannot overflow."""
    from loom.runtime import registry
    from loom.tools.cuda_timing import bus_bandwidth_gbs

    rank, world = comm.rank, comm.world_size
    rows = []
    for seed, (collective, size) in enumerate((c, s) for c in COLLECTIVES for s in sizes):
        count = size // 4
        data = arrays.inputs(seed, count)
        if collective == "allreduce":
            output = arrays.copy(data[rank])
            comm.all_reduce(output)
            expected = sum(arrays.as_float64(x) for x in data)
            timed_output, timed_input = arrays.zeros(count), None
            loom_call = lambda out=timed_output: comm.all_reduce(out)  # noqa: E731
        else:
            output = arrays.zeros(count * world)
            comm.all_gather(output, data[rank])
            expected = arrays.as_float64(arrays.concatenate(data))
            timed_output, timed_input = arrays.zeros(count * world), arrays.zeros(count)
            loom_call = lambda out=timed_output, inp=timed_input: comm.all_gather(out, inp)  # noqa: E731
        error = float(abs(arrays.as_float64(output) - expected).max())
        row = {"collective": collective, "bytes": size, "max_error": error, "matches": error <= TOLERANCE}
        inplace = collective == "allreduce"
        plan = registry.select(
            collective, size, "float32", world, comm.ranks_per_node, inplace=inplace, placement=comm.executor.placement
        )
        row["plan"] = plan.name if plan is not None else ("nothing to move" if inplace else "a local copy")
        row["loom_us"] = arrays.time_call(loom_call)
        row["loom_busbw_gbs"] = bus_bandwidth_gbs(collective, size, world, row["loom_us"])
        if arrays.nccl is not None:
            row["nccl_us"] = arrays.time_call(arrays.nccl(collective, timed_output, timed_input))
            row["nccl_busbw_gbs"] = bus_bandwidth_gbs(collective, size, world, row["nccl_us"])
        if arrays.time_eager is not None:
            row["loom_eager_us"] = arrays.time_eager(loom_call)
            if arrays.nccl is not None:
                row["nccl_eager_us"] = arrays.time_eager(arrays.nccl(collective, timed_output, timed_input))
        rows.append(row)
    return rows


# ---- Command line -----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cpu", action="store_true", help="run on the CPU backend even when GPUs are visible")
    parser.add_argument("--gpus", type=int, help="how many GPUs to use (default: all visible)")
    parser.add_argument(
        "--sizes",
        help=f"message sizes per rank, comma-separated (default {GPU_SIZES} on GPUs, one included, {CPU_SIZES} on CPU)",
    )
    parser.add_argument("--calls", type=int, default=20, help="calls captured per CUDA graph (default 20)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats, the median is shown (default 7)")
    parser.add_argument("--timeout", type=float, default=300, help="stop the GPU ranks after S seconds (default 300)")


def _worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m loom.tools.demo --worker|--one-gpu")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--worker", action="store_true", help="one rank of the run over several GPUs")
    mode.add_argument("--one-gpu", action="store_true", help="the run on one GPU")
    parser.add_argument("--plan", help="the demo plan (--worker)")
    parser.add_argument("--plans", help="JSON: world size -> demo plan (--one-gpu)")
    parser.add_argument("--results", required=True)
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--repeats", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    return _one_gpu_worker(args) if args.one_gpu else _worker(args)


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
