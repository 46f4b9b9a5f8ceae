"""The fast path (specialised transfers, executor/src/specialize.cc) against the generic one: every
library plan at 2, 4 and 8 ranks and 2 x 2, in and out of place, every data type, odd sizes (short last
chunks and a partial last unit), two calls in a row (both LL halves), on the CPU backend (the
interpreter is the GPU's). The outputs must be equal bit for bit; LOOM_FAST_PATH=0 selects the generic
path (the fast one is the default). The fast path runs a program whose every op specialises and which
fits the inline kernel's parameters from its inline records, as the GPU does; any other program runs
generically on both paths."""

from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

_native = pytest.importorskip("loom._native", reason="the native module is not built")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import loom  # noqa: E402
from loom.runtime.tensors import DTYPES, BufferView  # noqa: E402
from plan_buffers import plan_buffers  # noqa: E402
from rank_threads import run_ranks  # noqa: E402
from test_cpu_backend import _case_id, _cases, _plan  # noqa: E402

ITEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4, "float8_e4m3fn": 1, "float8_e5m2": 1}
CALLS = 2


def _random_bytes(dtype: str, count: int, seed: int) -> np.ndarray:
    """``count`` finite values of ``dtype`` as raw bytes (numpy has no bfloat16 or float8 types)."""
    rng = np.random.default_rng(seed)
    if dtype in ("float32", "float16"):
        values = rng.standard_normal(count).astype(dtype)
    elif dtype == "bfloat16":
        values = (rng.standard_normal(count).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    elif dtype in ("int32", "uint32"):
        values = rng.integers(0 if dtype == "uint32" else -1000, 1000, count).astype(dtype)
    else:  # float8: exponent bits kept below all-ones, so no NaN or infinity
        raw = rng.integers(0, 256, count, dtype=np.uint8)
        values = (raw & 0x77) | (raw & 0x80)
    return np.ascontiguousarray(values).view(np.uint8)


def _view(array: np.ndarray, dtype: str) -> BufferView:
    return BufferView(array.ctypes.data, array.nbytes, dtype, "cpu", None, array)


def _outputs(plan, calls: list[tuple[str, int, int]], generic: bool) -> list[list[bytes]]:
    """Every rank's output bytes after each call, with the fast or the generic path."""
    world = plan.world_size
    previous = os.environ.get("LOOM_FAST_PATH")
    os.environ["LOOM_FAST_PATH"] = "0" if generic else "1"

    def body(bootstrap):
        communicator = _native.Communicator(bootstrap, host_only=True)
        executor = loom.Executor(communicator, verified=False)
        rank = communicator.rank
        out = []
        for dtype, nbytes, seed in calls:
            data = _random_bytes(dtype, nbytes // ITEM_BYTES[dtype], seed + rank)
            source, target = plan_buffers(plan, rank, world, data)
            executor.execute_views(plan, _view(source, dtype), _view(target, dtype), "sum", 0)
            out.append(target.tobytes())
        stats = executor.stats()
        return out, stats["specialized_transfers"], stats["inlined_contexts"]

    try:
        results = run_ranks(world, _native.UniqueId.create("127.0.0.1"), body, timeout_ms=30000)
    finally:
        if previous is None:
            os.environ.pop("LOOM_FAST_PATH", None)
        else:
            os.environ["LOOM_FAST_PATH"] = previous
    for rank in range(world):
        if isinstance(results[rank], BaseException):
            raise results[rank]
    specialized = sum(results[rank][1] for rank in range(world))
    inlined = sum(results[rank][2] for rank in range(world))
    # The fast path takes a program whole or not at all: specialised ops run only in inline programs.
    assert (specialized > 0) == (inlined > 0) and not (generic and inlined)
    return [results[rank][0] for rank in range(world)], inlined


@pytest.mark.parametrize("case", _cases(), ids=_case_id)
def test_fast_and_generic_paths_agree_bit_for_bit(case):
    name, world, per_node, inplace = case
    plan = _plan(name, world, per_node, inplace)
    per_rank = world if plan.collective in ("reducescatter", "alltoall") else 1
    calls = []
    for dtype in DTYPES:
        unit = ITEM_BYTES[dtype] * per_rank
        for units in (3, 1001):  # odd: chunks end mid-vector and the last unit is partial
            seed = zlib.crc32(f"{_case_id(case)}-{dtype}-{units}".encode())
            calls += [(dtype, unit * units, seed + call) for call in range(CALLS)]
    fast, inlined = _outputs(plan, calls, generic=False)
    generic, _ = _outputs(plan, calls, generic=True)
    if name == "allreduce_allpairs_packet" and world <= 4:
        # Small enough for the kernel's parameters (loom/device/inline_program.hpp): the inline records ran.
        assert inlined > 0, "the LL one-shot all-reduce did not travel inline"
    for rank in range(world):
        for (dtype, nbytes, _), got, want in zip(calls, fast[rank], generic[rank], strict=True):
            assert got == want, f"rank {rank}, {dtype}, {nbytes} bytes: the fast path differs from the generic one"
