"""How a GPU check runs its ranks: one process per GPU under ``python -m loom.launch -n N`` (the default),
or with ``--share-gpu N`` as N threads of one process on GPU 0, each with its own stream (ranks sharing
one GPU, LOOM_SHARE_GPU=1: docs/testing.md). A rank waits for its own stream only: a device-wide
synchronisation would wait for kernels of other ranks that wait, in turn, for this rank's next call.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import torch
from loom import _native
from loom.host_ranks import run_ranks

# Under stream capture, CUDA calls of the other ranks' threads must not be refused.
CAPTURE_ERROR_MODE = "thread_local"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--share-gpu", type=int, default=0, metavar="N", help="run N ranks as threads on GPU 0 (LOOM_SHARE_GPU=1)"
    )


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

    def body(bootstrap: object) -> int:
        torch.cuda.set_device(0)
        with torch.cuda.stream(torch.cuda.Stream()):
            return rank_main(bootstrap)

    results = run_ranks(args.share_gpu, None, body, timeout_ms=120_000, join_timeout_s=3000)
    failed = 0
    for rank, result in sorted(results.items()):
        if isinstance(result, BaseException):
            print(f"rank {rank} FAIL: {type(result).__name__}: {result}", flush=True)
        failed += bool(result)
    return 1 if failed else 0
