"""Loom's plans beside NCCL (torch.distributed, backend "nccl") in the same run: latency and bus
bandwidth of all-reduce, all-gather and reduce-scatter (and all-to-all, with --collectives). One process
per GPU:

    python -m loom.launch -n 2 bench/collective_bench.py --plans DIR --out results.json [--mode MODE]

Modes: ``graph`` (default) times CUDA graph replay (many calls captured into one graph, replayed
several times, median): the GPU's time per call. ``eager-reused`` and ``eager-fresh`` time eager
calls by the host's wall clock (``--calls-per-graph`` calls back to back, then a synchronize; the
median of ``--repeats`` such runs): what a PyTorch job without graphs pays per call, host overhead
included, with the same output tensor every call or a new one from PyTorch's caching allocator
each call.

For every size the Loom plan is the one in DIR whose collective, world size and size range fit
(out of place). Each Loom result is also checked against the NCCL result of the same input.
"""

# The timed lambdas run within the loop iteration that defines them (ruff B023 does not see that).
# ruff: noqa: B023

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path
from statistics import median

import loom
import torch
import torch.distributed as dist
from loom import _native
from loom.tools.cuda_timing import bus_bandwidth_gbs, time_eager, time_graph
from tune_plans import fastest_candidates  # beside this file


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plans", required=True)
    parser.add_argument("--collectives", default="allreduce,allgather,reducescatter")
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=1 << 30)
    parser.add_argument("--calls-per-graph", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sizes", default="", help="message bytes, comma-separated (instead of the sweep)")
    parser.add_argument(
        "--every-plan", action="store_true", help="time every fitting plan of each size, not only the narrowest"
    )
    parser.add_argument(
        "--refine",
        type=int,
        default=0,
        help="time the N fastest plans of each size up to --refine-max-bytes again (with one plan per size:"
        " that plan), in --refine-rounds rounds interleaved with NCCL, and keep the medians (small sizes are"
        " noisy, and a slow spell of the machine then falls on both sides alike)",
    )
    parser.add_argument("--refine-max-bytes", type=int, default=16 << 20)
    parser.add_argument("--refine-rounds", type=int, default=4)
    parser.add_argument("--out", default="")
    parser.add_argument("--mode", choices=MODES, default="graph", help="graph replay or eager calls (docstring)")
    return parser.parse_args()


MODES = ("graph", "eager-reused", "eager-fresh")
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "reduce")


def timer(mode: str):
    return time_graph if mode == "graph" else time_eager


def fitting_plans(plans, collective: str, world: int, nbytes: int) -> list:
    return [
        p
        for p in plans
        if p.collective == collective
        and p.world_size == world
        and not p.inplace
        and p.min_message_bytes <= nbytes <= p.max_message_bytes
    ]


def pick_plans(plans, collective: str, world: int, nbytes: int, every: bool) -> list:
    """The plans to time at one size: the one with the narrowest size range, or all that fit."""
    fitting = fitting_plans(plans, collective, world, nbytes)
    if every or not fitting:
        return fitting
    return [min(fitting, key=lambda p: p.max_message_bytes - p.min_message_bytes)]


def sweep(args) -> list[int]:
    if args.sizes:
        return [int(x) for x in args.sizes.split(",")]
    sizes, size = [], args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= 4 if size < (1 << 20) else 2
    return sizes


def main() -> int:
    args = arguments()
    bootstrap = _native.Bootstrap.from_environment()
    rank, world = bootstrap.rank, bootstrap.world_size
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", local))
    executor = loom.Executor(
        _native.Communicator(bootstrap), verified=False
    )  # plans proven where built: this checks the GPU executor
    plans = [_native.Plan.load(str(p)) for p in sorted(Path(args.plans).glob("*.json"))]
    rows, failures = [], 0
    meta = {
        "mode": args.mode,
        "world_size": world,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "cuda": torch.version.cuda,
        "fast_path": os.environ.get("LOOM_FAST_PATH", "1"),  # which interpreter kernel ran (docs/executor.md)
        "date": datetime.date.today().isoformat(),
    }
    for collective in args.collectives.split(","):
        for size in sweep(args):
            count = size // 4
            data = torch.randn(count, device="cuda") * (rank + 1)
            out_count = {"allgather": count * world, "reducescatter": count // world}.get(collective, count)
            if collective not in COLLECTIVES:
                raise SystemExit(f"--collectives: {collective!r} is not one of {', '.join(COLLECTIVES)}")
            loom_out = torch.zeros(out_count, device="cuda")
            nccl_out = torch.zeros(out_count, device="cuda")
            fresh = args.mode == "eager-fresh"

            def output() -> torch.Tensor:  # eager-fresh: a new tensor from the caching allocator per call
                return torch.empty(out_count, device="cuda") if fresh else nccl_out

            if collective == "allreduce":
                nccl = lambda: (nccl_out.copy_(data), dist.all_reduce(nccl_out))  # noqa: E731
                nccl_only = lambda: dist.all_reduce(output())  # noqa: E731
            elif collective == "alltoall":
                nccl = lambda: dist.all_to_all_single(nccl_out, data)  # noqa: E731
                nccl_only = lambda: dist.all_to_all_single(output(), data)  # noqa: E731
            elif collective == "reduce":  # to rank 0, whose output alone is compared below
                nccl = lambda: (nccl_out.copy_(data), dist.reduce(nccl_out, dst=0))  # noqa: E731
                nccl_only = lambda: dist.reduce(output(), dst=0)  # noqa: E731
            elif collective == "allgather":
                nccl = lambda: dist.all_gather_into_tensor(nccl_out, data)  # noqa: E731
                nccl_only = lambda: dist.all_gather_into_tensor(output(), data)  # noqa: E731
            else:
                nccl = lambda: dist.reduce_scatter_tensor(nccl_out, data)  # noqa: E731
                nccl_only = lambda: dist.reduce_scatter_tensor(output(), data)  # noqa: E731
            nccl()
            torch.cuda.synchronize()
            time_calls = timer(args.mode)
            nccl_us = time_calls(nccl_only, args.calls_per_graph, args.repeats, dist.barrier)
            target = lambda: torch.empty_like(loom_out) if fresh else loom_out  # noqa: E731

            def time_plan(plan) -> float:
                return time_calls(
                    lambda: executor.execute(plan, data, target()), args.calls_per_graph, args.repeats, dist.barrier
                )

            size_rows, by_name = [], {}
            for plan in pick_plans(plans, collective, world, size, args.every_plan) or [None]:
                row = {"collective": collective, "bytes": size, "mode": args.mode, "nccl_us": nccl_us}
                size_rows.append(row)
                if plan is not None:
                    row["plan"] = plan.name
                    by_name[plan.name] = plan
                    loom_out.zero_()
                    try:
                        row["loom_us"] = time_plan(plan)
                    except loom.InvalidArgumentError as error:
                        # More blocks than the GPU holds at once (every rank refuses alike): a candidate
                        # of bench/tune_plans.py too wide for this GPU, not a failure.
                        if "the GPU holds at most" not in str(error):
                            raise
                        row["refused"] = str(error)
                        continue
                    loom_out.zero_()
                    executor.execute(plan, data, loom_out)  # the result checked below
                    nccl()  # the reference result of this input (timing ran the in-place NCCL call repeatedly)
                    torch.cuda.synchronize()
                    error = (loom_out - nccl_out).abs().max().item() / max(nccl_out.abs().max().item(), 1e-30)
                    if collective == "reduce" and rank != 0:
                        error = 0.0  # only the root's output is defined
                    row["max_relative_difference"] = error
                    if error > 1e-5:
                        failures += 1
            if args.refine and size <= args.refine_max_bytes and by_name:
                # The fastest few again, in rounds that also time NCCL, so that a slow spell of the machine
                # falls on all of them alike; each keeps the median of its times. Rank 0's times choose them
                # (the calls are collective: every rank must time the same plans).
                chosen = [fastest_candidates(size_rows, args.refine)] if rank == 0 else [None]
                dist.broadcast_object_list(chosen, src=0)
                more = {name: [] for name in chosen[0]}
                nccl_more = []
                for _ in range(args.refine_rounds):
                    nccl_more.append(time_calls(nccl_only, args.calls_per_graph, args.repeats, dist.barrier))
                    for name in more:
                        more[name].append(time_plan(by_name[name]))
                for row in size_rows:
                    row["nccl_us"] = median([nccl_us, *nccl_more])
                    if row.get("plan") in more:
                        row["loom_us"] = median([row["loom_us"], *more[row["plan"]]])
                        row["refined"] = args.refine_rounds
            for row in size_rows:
                for who in ("nccl", "loom"):
                    if f"{who}_us" in row:
                        row[f"{who}_busbw_gbs"] = bus_bandwidth_gbs(collective, size, world, row[f"{who}_us"])
                if rank == 0:
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            if rank == 0 and args.out:  # after every size: a run cut short by its time limit keeps what it measured
                Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
