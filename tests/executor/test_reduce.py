"""Reduce to a root on the CPU backend (ranks on host threads), against numpy: every root, operators sum,
min and max, several data types and sizes, in and out of place at the root; a non-root rank's output is
never written, and it may be its input."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from loom.compiler.driver import compile_algorithm

_native = pytest.importorskip("loom._native", reason="the native module is not built")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import loom  # noqa: E402
from loom.errors import InvalidArgumentError  # noqa: E402
from loom.runtime.tensors import buffer_view  # noqa: E402
from rank_threads import run_local_ranks  # noqa: E402

WORLD = 4
OPS = ("sum", "min", "max")
REDUCE = {"sum": np.add.reduce, "min": np.minimum.reduce, "max": np.maximum.reduce}


def _plan_text(root: int, inplace: bool, op: str, instances: int = 2) -> str:
    text = compile_algorithm(
        "reduce_read",
        WORLD,
        root=root,
        inplace=inplace,
        instances=instances,
        plan_name=f"t_reduce_root{root}_{op}" + ("_inplace" if inplace else ""),
        verify=False,
        max_message_size=1 << 22,
    )
    return text.replace('"reduce_op": "sum"', f'"reduce_op": "{op}"')


@pytest.fixture
def registered(tmp_path, monkeypatch):
    """In-place reduce plans for every root and operator, as user plans; no bundled plans in the way."""
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LOOM_DEFAULT_PLANS", "0")
    loom.registry.load_default_plans()
    names = []
    for root in range(WORLD):
        for op in OPS:
            plan = _native.Plan.parse(_plan_text(root, True, op))
            loom.register_plan(plan)
            names.append(plan.name)
    yield
    for name in names:
        loom.unregister_plan(name)


def _inputs(dtype, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    if np.issubdtype(dtype, np.integer):
        return [rng.integers(-1000, 1000, count).astype(dtype) for _ in range(WORLD)]
    # Small integers as floats: every sum order gives the same result, so compare exactly.
    return [rng.integers(-64, 64, count).astype(dtype) for _ in range(WORLD)]


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
@pytest.mark.parametrize("count", [1, 37, 4096, 100_003])
def test_reduce_matches_numpy_for_every_root_and_operator(registered, dtype, count):
    inputs = _inputs(dtype, count)

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        rank = comm.rank
        for root in range(WORLD):
            for op in OPS:
                expected = REDUCE[op](np.stack(inputs), axis=0).astype(dtype)
                # Out of place at the root: the input stays, the output gets the result; elsewhere the
                # output is a buffer the call must leave alone.
                mine = inputs[rank].copy()
                output = np.full(count, 99, dtype)
                comm.reduce(mine, root=root, op=op, output=output)
                np.testing.assert_array_equal(mine, inputs[rank])
                if rank == root:
                    np.testing.assert_array_equal(output, expected)
                else:
                    np.testing.assert_array_equal(output, np.full(count, 99, dtype))
                # In place: the root's tensor becomes the result, the others' stay their input.
                mine = inputs[rank].copy()
                comm.reduce(mine, root, op)
                np.testing.assert_array_equal(mine, expected if rank == root else inputs[rank])
        return comm.executor.stats()["launches"]

    assert all(launches == WORLD * len(OPS) * 2 for launches in run_local_ranks(WORLD, body).values())


def test_an_out_of_place_plan_leaves_non_root_outputs_alone_even_when_they_are_the_input(tmp_path, monkeypatch):
    """The executor itself: an out-of-place reduce plan, run with a non-root rank's output equal to its
    input (as NCCL callers do) or another buffer; the root's output is a buffer of its own."""
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LOOM_DEFAULT_PLANS", "0")
    root, count = 2, 5000
    plan = _native.Plan.parse(_plan_text(root, False, "sum", instances=3))
    inputs = _inputs(np.float32, count)

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        rank = comm.rank
        mine = inputs[rank].copy()
        other = np.full(count, 5.0, np.float32)
        output = other if rank == root or rank == 1 else mine
        comm.executor.execute_views(plan, buffer_view(mine, "input"), buffer_view(output, "output"), "sum", 0)
        np.testing.assert_array_equal(mine, inputs[rank])
        if rank == root:
            np.testing.assert_array_equal(output, np.add.reduce(np.stack(inputs), axis=0))
        elif rank == 1:
            np.testing.assert_array_equal(output, np.full(count, 5.0, np.float32))
        # the root's output may not overlap its input in an out-of-place plan
        if rank == root:
            with pytest.raises(InvalidArgumentError, match="overlaps the input"):
                comm.executor.execute_views(plan, buffer_view(mine, "input"), buffer_view(mine, "output"), "sum", 0)
        return True

    assert all(run_local_ranks(WORLD, body).values())


def test_reduce_checks_its_arguments(registered):
    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        data = np.ones(16, np.float32)
        with pytest.raises(InvalidArgumentError, match="root: expected a rank from 0 to 3, got 4"):
            comm.reduce(data, root=4)
        if comm.rank == 0:
            with pytest.raises(InvalidArgumentError, match="output: expected 64 bytes of float32"):
                comm.reduce(data, root=0, output=np.ones(8, np.float32))
        return True

    assert all(run_local_ranks(WORLD, body).values())
