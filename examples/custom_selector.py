"""A custom selector and a fallback: choose the plan per call yourself.

Two library all-reduces are compiled (``loom.compile``, cached) and registered: a one-shot packet plan
for latency and a reduce-scatter + all-gather plan for bandwidth. The selector below takes the packet
plan up to 32 KiB, and the bandwidth plan above or whenever a call asks for the "bandwidth" tag. Calls
that no registered plan fits (here, above 1 MiB) go to the fallback, which could call NCCL; on the CPU
backend it sums over the bootstrap.

    python examples/custom_selector.py        # 4 ranks on the CPU backend, no GPU needed

On GPUs the same registry and selector serve ``loom.Communicator`` unchanged (see
examples/pytorch_training_loop.py for the launch).
"""

from __future__ import annotations

import os
import threading

os.environ["LOOM_DEFAULT_PLANS"] = "0"  # only this example's plans, so that the fallback has work to do

import loom  # noqa: E402
import numpy as np  # noqa: E402
from loom.runtime.host_ranks import run_ranks  # noqa: E402

WORLD = 4
SMALL = 32 * 1024
LARGEST = 1 << 20
chosen: list[tuple[str, int, str]] = []  # what the selector decided, once per distinct request


def selector(request):
    """Gets the call (collective, message_bytes, dtype, world_size, inplace, capturing, tags) and the
    registered plans that fit it, best first; returns one of them, or None for the fallback."""
    wanted = "latency" if request.message_bytes <= SMALL and "bandwidth" not in request.tags else "bandwidth"
    plan = next((p for p in request.candidates if wanted in p.tags), None)
    chosen.append((request.collective, request.message_bytes, plan.name if plan else "fallback"))
    return plan


_rank = threading.local()  # the fallback needs the calling rank's bootstrap; each rank is a thread here


def fallback(request, output, input):
    """What runs when no plan fits: with torch this would be torch.distributed.all_reduce(output)."""
    pieces = _rank.bootstrap.all_gather(input.tobytes())
    output[...] = sum(np.frombuffer(piece, dtype=input.dtype).astype(np.float64) for piece in pieces)


def register_plans() -> None:
    common = {"world_size": WORLD, "inplace": True, "min_message_size": 0}
    latency = loom.compile("allreduce_allpairs_packet", {**common, "instances": 2, "max_message_size": SMALL})
    bandwidth = loom.compile("allreduce_rs_ag", {**common, "instances": 4, "max_message_size": LARGEST})
    loom.register_plan(latency, tags=["latency"], replace=True)
    loom.register_plan(bandwidth, tags=["bandwidth"], replace=True)
    loom.set_selector(selector)
    loom.set_fallback(fallback)


def main() -> None:
    register_plans()
    sizes = [4 * 1024, 256 * 1024, 4 << 20]

    def rank_body(bootstrap):
        _rank.bootstrap = bootstrap
        comm = loom.Communicator(bootstrap, host_only=True)
        bandwidth_comm = loom.Communicator(bootstrap, host_only=True, tags=["bandwidth"])
        errors = []
        for size in sizes:
            for communicator in (comm, bandwidth_comm):
                data = np.random.default_rng([size, comm.rank]).standard_normal(size // 4).astype(np.float32)
                expected = sum(
                    np.random.default_rng([size, r]).standard_normal(size // 4).astype(np.float64) for r in range(WORLD)
                )
                communicator.all_reduce(data)
                errors.append(float(abs(data - expected).max()))
        return max(errors)

    outcomes = run_ranks(WORLD, None, rank_body, timeout_ms=60000)
    for rank, outcome in sorted(outcomes.items()):
        if isinstance(outcome, BaseException):
            raise outcome
        print(f"rank {rank}: largest error over all calls {outcome:.2e}")
    for collective, size, name in sorted(set(chosen), key=lambda c: (c[1], c[2])):
        print(f"{collective} of {size} bytes -> {name}")
    print(f"registry: {loom.registry.stats()}")


if __name__ == "__main__":
    main()
