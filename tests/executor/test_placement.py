"""Plans that fit where they launch (issue 55): the selector passes over plans whose thread blocks the GPU
cannot keep resident for every rank on it, takes the next that fits, and the JIT compiles the algorithm
with fewer instances where none does. On the CPU backend, LOOM_CPU_RESIDENT_BLOCKS stands in for a GPU
that holds that many blocks, shared by the ranks on threads of this process; on one GPU the demo and
tests/executor/test_shared_gpu.py run the same rule."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

_native = pytest.importorskip("loom._native", reason="the native module is not built")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import loom  # noqa: E402
from loom.compiler.jit_plans import plan_for_call, thread_blocks  # noqa: E402
from loom.errors import LoomError  # noqa: E402
from rank_threads import run_local_ranks  # noqa: E402

WORLD = 4
# The bundled 4-rank all-gather for 16 KiB per rank (allgather_fullmesh_4r_16384_23170) has 64 thread blocks
# per rank, tuned on 4 GPUs of their own; 4 ranks on a GPU of 128 resident blocks may run 32 each.
ALLGATHER_BYTES = 16384
RESIDENT_BLOCKS = 128


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    loom.registry.set_selector(None)
    yield tmp_path
    _native.registry_clear("user")


def _all_gather(world: int, count: int) -> dict:
    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        data = np.random.default_rng(comm.rank).standard_normal(count).astype(np.float32)
        output = np.zeros(count * world, np.float32)
        comm.all_gather(output, data)
        parts = [np.random.default_rng(r).standard_normal(count).astype(np.float32) for r in range(world)]
        expected = np.concatenate(parts)
        placement = comm.executor.placement
        chosen = loom.registry.select("allgather", count * 4, "float32", world, world, placement=placement)
        return placement, chosen.name, bool(np.array_equal(output, expected))

    return run_local_ranks(world, body)


def test_a_bundled_plan_that_does_not_fit_is_passed_over_for_a_jit_plan_with_fewer_instances(cache, monkeypatch):
    monkeypatch.setenv("LOOM_CPU_RESIDENT_BLOCKS", str(RESIDENT_BLOCKS))
    results = _all_gather(WORLD, ALLGATHER_BYTES // 4)
    for placement, name, right in results.values():
        assert placement == (WORLD, RESIDENT_BLOCKS)
        assert right
        assert name.startswith("allgather_fullmesh_4r_16384_23170_i"), name
    jit = loom.registry.list_plans("allgather", WORLD, "user")
    assert [entry.name for entry in jit] == [results[0][1]]
    assert jit[0].thread_blocks <= RESIDENT_BLOCKS // WORLD
    bundled = _native.registry_find("allgather_fullmesh_4r_16384_23170")
    assert bundled.thread_blocks == 64 and bundled.source == "bundled"  # still registered, for GPUs of their own
    [(entry, why)] = _native.registry_passed_over(
        "allgather", ALLGATHER_BYTES, "float32", WORLD, WORLD, placement=(WORLD, RESIDENT_BLOCKS)
    )
    assert entry.name == "allgather_fullmesh_4r_16384_23170"
    assert why == (
        "64 thread blocks per rank, but 4 ranks sharing the GPU may run at most 32 each (the GPU holds 128"
        " interpreter blocks at once)"
    )


def test_without_a_limit_the_bundled_plan_runs(cache, monkeypatch):
    monkeypatch.delenv("LOOM_CPU_RESIDENT_BLOCKS", raising=False)
    for placement, name, right in _all_gather(WORLD, ALLGATHER_BYTES // 4).values():
        assert placement == (WORLD, 0xFFFFFFFF) and right and name == "allgather_fullmesh_4r_16384_23170"


def test_the_jit_scales_instances_down_to_the_limit(cache):
    call = {"world_size": 4, "ranks_per_node": 4, "message_bytes": ALLGATHER_BYTES, "inplace": False}
    assert thread_blocks(plan_for_call("allgather", **call).text) == 64
    for limit in (32, 20, 4):
        found = plan_for_call("allgather", **call, max_thread_blocks=limit)
        assert thread_blocks(found.text) <= limit, (limit, found.name)
        assert found.name.startswith("allgather_fullmesh_4r_16384_23170_i")
    with pytest.raises(LoomError, match=r"runs: allgather_fullmesh with 1 instance\(s\) has 4 thread blocks"):
        plan_for_call("allgather", **call, max_thread_blocks=3)


def test_when_nothing_can_fit_the_error_says_why(cache, monkeypatch):
    # 12 resident blocks for 4 ranks: 3 each, fewer than any all-gather of 4 ranks needs (4 with one instance).
    monkeypatch.setenv("LOOM_CPU_RESIDENT_BLOCKS", "12")

    def body(bootstrap):
        comm = loom.Communicator(bootstrap, host_only=True)
        try:
            comm.all_gather(np.zeros(WORLD * 4096, np.float32), np.ones(4096, np.float32))
        except LoomError as error:
            return str(error)
        return "ran"

    for text in run_local_ranks(WORLD, body).values():
        assert "fits where it runs" in text and "at most 3 fit" in text, text


def test_a_malformed_resident_block_count_names_the_variable(cache, monkeypatch):
    monkeypatch.setenv("LOOM_CPU_RESIDENT_BLOCKS", "many")

    def body(bootstrap):
        try:
            return loom.Communicator(bootstrap, host_only=True).executor.placement
        except loom.errors.InvalidArgumentError as error:
            return str(error)

    for text in run_local_ranks(2, body).values():
        assert "LOOM_CPU_RESIDENT_BLOCKS" in text, text
