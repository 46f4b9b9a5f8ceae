"""Run two plans of one collective on the CPU backend (ranks as threads) on the same random int32
data and compare their outputs bit for bit: how the compatibility suite checks that MSCCL++'s plan of a
program, imported, computes what Loom's own compilation of it computes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plan_buffers import plan_buffers  # noqa: E402


def _message_bytes(plan_text: str, plan) -> int:
    """A size both plans of a program take: whole 16-byte pieces in every input chunk of every rank
    (plans that forward packets need them), at least 1 KiB, inside the plan's range."""
    chunks = max(gpu["input_chunks"] for gpu in json.loads(plan_text)["gpus"])
    unit = 16 * max(chunks, 1) * plan.world_size
    size = -(-max(1024, plan.min_message_bytes) // unit) * unit
    return size if size <= plan.max_message_bytes else plan.max_message_bytes // unit * unit


def run(plan_text: str, nbytes: int, seed: int = 7) -> list[np.ndarray]:
    """Every rank's output after one call of the plan on nbytes per rank of random int32 data."""
    import loom
    from loom.native import native_module
    from loom.runtime.host_ranks import run_ranks

    native = native_module()
    plan = loom.Plan.parse(plan_text)
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(-1000, 1000, nbytes // 4).astype(np.int32) for _ in range(plan.world_size)]

    def body(bootstrap):
        communicator = native.Communicator(bootstrap, host_only=True)
        source, target = plan_buffers(plan, communicator.rank, plan.world_size, inputs[communicator.rank])
        loom.Executor(communicator).execute(plan, source, target)
        return target.copy()

    results = run_ranks(plan.world_size, None, body, timeout_ms=30000)
    for result in results.values():
        if isinstance(result, BaseException):
            raise result
    return [results[rank] for rank in range(plan.world_size)]


def compare_runs(ours: str, theirs: str) -> str:
    """ "same" when both plans give equal outputs on every rank, else what went wrong first."""
    import loom

    try:
        ours_plan, theirs_plan = loom.Plan.parse(ours), loom.Plan.parse(theirs)
        if (ours_plan.collective, ours_plan.world_size) != (theirs_plan.collective, theirs_plan.world_size):
            return "the plans differ in collective or world size"
        nbytes = _message_bytes(ours, ours_plan)
        if not theirs_plan.min_message_bytes <= nbytes <= theirs_plan.max_message_bytes:
            return f"no common size ({nbytes} B is outside the imported plan's range)"
        mine, other = run(ours, nbytes), run(theirs, nbytes)
    except Exception as error:  # noqa: BLE001 - any failure is a row of the report
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"[:300]
    differing = [rank for rank, (a, b) in enumerate(zip(mine, other, strict=True)) if not np.array_equal(a, b)]
    return "same" if not differing else f"outputs differ on ranks {differing}"
