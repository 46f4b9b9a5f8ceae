"""Timing collectives on GPUs the same way for Loom and NCCL: CUDA graph replay or eager calls by the host's
clock, medians, bus bandwidth.

Needs torch; used by ``loom demo`` and ``bench/collective_bench.py``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

# Bus bandwidth = algorithm bandwidth x this factor (nccl-tests' definition): what each link carries.
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "reduce": lambda n: 1.0,
}


def bus_bandwidth_gbs(collective: str, message_bytes: int, world_size: int, microseconds: float) -> float:
    """Bus bandwidth in GB/s. ``message_bytes`` is one rank's input (nccl-tests count the all-gather's
    whole output, world_size x its input)."""
    total = message_bytes * (world_size if collective == "allgather" else 1)
    return total * BUS_FACTOR[collective](world_size) / (microseconds * 1e3)


def time_graph(body: Callable[[], object], calls: int, repeats: int, barrier: Callable[[], object]) -> float:
    """Median microseconds per call of ``body`` captured ``calls`` times into one CUDA graph.

    ``body`` runs three times on a side stream first, so that setup (connections, contexts) happens
    before capture. Each of the ``repeats`` replays starts after ``barrier()`` (every rank's), timed by
    CUDA events.
    """
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            body()
    graph.replay()  # warm-up replay
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        barrier()
        torch.cuda.synchronize()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(samples)


def time_stream(body: Callable[[], object], calls: int, repeats: int, barrier: Callable[[], object]) -> float:
    """Median microseconds per call of ``calls`` eager calls of ``body`` on the current stream, timed by
    CUDA events: for ranks sharing one GPU, whose threads cannot capture graphs at once and must wait for
    their own stream only (docs/testing.md). ``body`` runs once first, outside the timing (setup)."""
    import torch

    body()
    torch.cuda.current_stream().synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        barrier()
        start.record()
        for _ in range(calls):
            body()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(samples)


__all__ = ["BUS_FACTOR", "bus_bandwidth_gbs", "time_graph", "time_stream"]


def time_eager(body: Callable[[], object], calls: int, repeats: int, barrier: Callable[[], object]) -> float:
    """Median microseconds of host wall time per call of ``calls`` eager calls of ``body`` run back to back
    and then waited for (``torch.cuda.synchronize``): what a job without CUDA graphs pays per call, host
    overhead included. Three calls run first, outside the timing (setup)."""
    import time

    import torch

    for _ in range(3):
        body()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            body()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e6 / calls)
    return statistics.median(samples)
