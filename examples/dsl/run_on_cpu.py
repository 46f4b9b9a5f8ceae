"""Runs a compiled plan on the CPU backend, one process per rank, and checks every call against float64:
how to test a plan (a multi-node one too) without GPUs (docs/dsl.md, "Testing a plan without GPUs").

    python -m loom.launch -n 2 examples/dsl/run_on_cpu.py port_flush.json --hosts 2

``--hosts H`` makes the processes act as H hosts (LOOM_TEST_HOST_ID: the first ranks on one, the next on the
next), so that ranks on different "hosts" reach each other over port channels (TCP), as across nodes. The plan
is registered first, so it is proven by this Loom's verifier before it runs (a refuted one is refused, naming
the finding). Prints one line per rank; exits 1 if any output is wrong.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def expected(collective: str, inputs: list[np.ndarray], rank: int) -> np.ndarray:
    world = len(inputs)
    if collective == "allreduce":
        return np.sum(inputs, axis=0, dtype=np.float64)
    if collective == "allgather":
        return np.concatenate(inputs).astype(np.float64)
    if collective == "sendrecv":
        return inputs[(rank - 1) % world].astype(np.float64)
    raise SystemExit(f"run_on_cpu.py checks allreduce, allgather and sendrecv plans, not {collective}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--elements", type=int, default=4096 + 6)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ["LOOM_TEST_HOST_ID"] = f"host{rank * args.hosts // world}"  # before Loom asks for its host

    import loom

    plan = loom.register_plan(args.plan).plan  # proven here, or refused with the verifier's finding
    comm = loom.Communicator(host_only=True)
    elements = args.elements - args.elements % (2 * world)  # whole chunks of every buffer
    wrong = 0
    for call in range(args.calls):
        rng = np.random.default_rng(call)  # every rank draws every rank's input: each checks its own output
        inputs = [rng.integers(-8, 8, elements).astype(np.float32) for _ in range(world)]
        source = inputs[rank].copy()
        if plan.collective == "allgather":
            output = np.zeros(elements * world, np.float32)
        else:
            output = source if plan.inplace else np.zeros(elements, np.float32)
        comm.executor.execute(plan, source, output)
        wrong += not np.array_equal(output.astype(np.float64), expected(plan.collective, inputs, rank))
    print(f"rank {rank} on host{rank * args.hosts // world}: {args.calls - wrong} of {args.calls} calls right")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
