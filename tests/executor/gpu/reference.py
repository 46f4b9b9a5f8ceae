"""Random inputs and float64 references for the executor's GPU checks (torch)."""

from __future__ import annotations

import torch

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "uint32": torch.uint32,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}
# Unit roundoff of each floating type (2^-mantissa bits); integers must match exactly.
_EPSILON = {
    "float32": 2.0**-23,
    "float16": 2.0**-10,
    "bfloat16": 2.0**-7,
    "float8_e4m3fn": 2.0**-3,
    "float8_e5m2": 2.0**-2,
}
_REDUCING = ("allreduce", "reducescatter")


def make_input(seed: int, rank: int, nbytes: int, dtype_name: str, device: str) -> torch.Tensor:
    """Rank `rank`'s input of a call: the same on every rank that asks, so each can build the reference."""
    dtype = DTYPES[dtype_name]
    count = nbytes // dtype.itemsize
    # Drawn on the host: a CUDA generator cannot be made while a rank sharing the GPU captures a graph.
    generator = torch.Generator().manual_seed(seed * 1009 + rank)
    if dtype_name in ("int32", "uint32"):
        low = 0 if dtype_name == "uint32" else -1000
        values = torch.randint(low, 1000, (count,), generator=generator, dtype=torch.int64)
    else:
        values = torch.randn(count, generator=generator, dtype=torch.float32)
    return values.to(device).to(dtype)


def as_float64(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dtype == torch.uint32:
        return tensor.to(torch.int64).to(torch.float64)
    if tensor.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return tensor.to(torch.float32).to(torch.float64)
    return tensor.to(torch.float64)


def expected_output(plan, rank: int, inputs: list[torch.Tensor], op: str = "sum"):
    """(reference in float64, the magnitude that bounds its rounding error, or None when the output must
    match exactly: collectives that only move data) for rank `rank`."""
    world = len(inputs)
    values = [as_float64(x) for x in inputs]
    collective = plan.collective
    if collective == "reduce" and rank != plan.root:
        # Only the root gets the sum; another rank's output stays as plan_check.buffers left it (its input in
        # place, zeros out of place): a plan that wrote it fails here.
        return (values[rank] if plan.inplace else torch.zeros_like(values[rank])), None
    if collective in (*_REDUCING, "reduce"):
        stacked = torch.stack(values)
        total = {"sum": stacked.sum(0), "min": stacked.min(0).values, "max": stacked.max(0).values}[op]
        scale = stacked.abs().sum(0)
        if collective == "reducescatter":
            piece = total.numel() // world
            return total[rank * piece : (rank + 1) * piece], scale[rank * piece : (rank + 1) * piece]
        return total, scale
    if collective == "allgather":
        out = torch.cat(values)
    elif collective == "alltoall":
        piece = values[0].numel() // world
        out = torch.cat([values[p][rank * piece : (rank + 1) * piece] for p in range(world)])
    elif collective == "broadcast":
        out = values[plan.root]
    elif collective == "sendrecv":
        out = values[(rank - 1) % world]
    else:
        raise ValueError(f"no reference for {collective}")
    return out, None


def check_output(output: torch.Tensor, expected: tuple[torch.Tensor, torch.Tensor], dtype_name: str, world: int):
    """(ok, worst error relative to the bound's scale). Moves are exact; reductions within a few roundings."""
    reference, scale = expected
    got = as_float64(output)
    if got.shape != reference.shape:
        return False, float("inf")
    difference = (got - reference).abs()
    if scale is None or dtype_name not in _EPSILON:
        return bool(torch.equal(got, reference)), float(difference.max().item()) if difference.numel() else 0.0
    bound = _EPSILON[dtype_name] * (world + 2) * scale + 1e-30
    error = (difference / (scale + 1e-30)).max().item() if difference.numel() else 0.0
    finite = torch.isfinite(got).all().item()
    return bool(finite and (difference <= bound).all().item()), float(error)


def mismatch_summary(output: torch.Tensor, expected: tuple[torch.Tensor, torch.Tensor]) -> str:
    """Where a failing output differs from the reference beyond rounding: count, first and last element,
    and the first few bad values, to tell a misplaced range from a numeric error."""
    reference, scale = expected
    got = as_float64(output)
    if got.shape != reference.shape:
        return f"shape {tuple(got.shape)} != {tuple(reference.shape)}"
    close = got == reference if scale is None else (got - reference).abs() <= 1e-2 * scale + 1e-6
    bad = torch.nonzero(~close).flatten()
    if bad.numel() == 0:
        return "no element off by more than 1%"
    first = bad[:4].tolist()
    return (
        f"{bad.numel()} of {got.numel()} elements differ, indices {int(bad[0])}..{int(bad[-1])}; first: "
        + ", ".join(f"[{i}] {got[i].item():.4g} vs {reference[i].item():.4g}" for i in first)
    )
