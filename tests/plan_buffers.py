"""The input and output arrays one rank hands a plan for a call, in or out of place, as the collective
lays them out (docs/plan-format.md): shared by the CPU-backend tests and the MSCCL++ compatibility runs."""

from __future__ import annotations

import numpy as np


def plan_buffers(plan, rank: int, world: int, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) for ``rank`` whose input is ``data``: in place they are views of one array."""
    m = data.size
    count = {"allgather": m * world, "reducescatter": m // world}.get(plan.collective, m)
    if not plan.inplace:
        return data.copy(), np.zeros(count, data.dtype)
    if plan.collective == "allgather":
        output = np.zeros(count, data.dtype)
        output[rank * m : (rank + 1) * m] = data
        return output[rank * m : (rank + 1) * m], output
    source = data.copy()
    if plan.collective == "reducescatter":
        return source, source[rank * count : (rank + 1) * count]
    return source, source
