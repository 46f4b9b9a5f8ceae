"""How a GPU check runs its ranks: one process per GPU under ``python -m loom.launch -n N`` (the default),
or with ``--share-gpu N`` as N threads of one process on GPU 0, each with its own stream (ranks sharing
one GPU, LOOM_SHARE_GPU=1: docs/testing.md). A rank waits for its own stream only: a device-wide
synchronisation would wait for kernels of other ranks that wait, in turn, for this rank's next call.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from loom import _native
from loom.runtime.host_ranks import run_ranks


@contextlib.contextmanager
def capture(graph: torch.cuda.CUDAGraph) -> Iterator[None]:
    """Capture ``graph`` on a side stream, as torch.cuda.graph does but without its device-wide
    synchronisation, which CUDA refuses while another rank's thread captures (ranks sharing a GPU capture
    at once: their calls exchange a byte over the bootstrap), and with CUDA calls of other threads allowed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            yield
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--share-gpu", type=int, default=0, metavar="N", help="run N ranks as threads on GPU 0 (LOOM_SHARE_GPU=1)"
    )


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """--plans (the checks of a folder of plans) and add_arguments' options."""
    parser.add_argument("--plans", required=True, help="a folder of plan JSON files (those for this world size run)")
    add_arguments(parser)


def out_of_place_plans(folder: str, world: int, size: int) -> Iterator[tuple[Path, object, int]]:
    """(path, plan, message bytes) of each out-of-place plan for ``world`` ranks in ``folder``: ``size`` in
    whole 4-byte elements per rank (its own smallest size where that is larger), where the plan takes it."""
    unit = 4 * world
    for path in sorted(Path(folder).glob("*.json")):
        plan = _native.Plan.load(str(path))
        if plan.world_size != world or plan.inplace:
            continue
        bytes_ = max(size // unit * unit, plan.min_message_bytes // unit * unit)
        if plan.min_message_bytes <= bytes_ <= plan.max_message_bytes:
            yield path, plan, bytes_


def synchronize() -> None:
    """Wait for this rank's work (its current stream), not for the other ranks' kernels."""
    torch.cuda.current_stream().synchronize()


def run(args: argparse.Namespace, rank_main: Callable[[object], int]) -> int:
    """Run ``rank_main(bootstrap)`` (returns its failure count) for each rank; 1 if any failed, else 0."""
    if not args.share_gpu:
        bootstrap = _native.Bootstrap.from_environment()
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", bootstrap.rank)))
        return 1 if rank_main(bootstrap) else 0
    os.environ["LOOM_SHARE_GPU"] = "1"
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"  # read when CUDA starts, which is still to come here
    os.environ["CUDA_MODULE_LOADING"] = "EAGER"  # likewise (docs/testing.md says why)

    def body(bootstrap: object) -> int:
        torch.cuda.set_device(0)
        try:
            with torch.cuda.stream(torch.cuda.Stream()):
                return rank_main(bootstrap)
        except Exception as error:  # said at once: the other ranks may wait for this one until they time out
            # One print, every traceback line marked with the rank: the ranks are threads, and their
            # tracebacks would otherwise interleave with no way to tell whose frame is whose.
            marked = [f"[rank {bootstrap.rank}] {line}" for line in traceback.format_exc().splitlines()]
            print("\n".join([f"rank {bootstrap.rank} FAIL: {type(error).__name__}: {error}", *marked]), flush=True)
            return 1

    results = run_ranks(args.share_gpu, None, body, timeout_ms=60_000, join_timeout_s=3000)
    return 1 if any(results.values()) else 0
