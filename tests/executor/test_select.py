"""`loom select` (issue 55): which plan a call gets and why, without running it: a bundled table's plan, a
user plan, a JIT plan (for a shape without bundled plans, or with fewer instances where the bundled plan does
not fit the placement), or none, with each plan it passed over and the numbers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_native = pytest.importorskip("loom._native", reason="the native module is not built")
import loom  # noqa: E402
from loom.tools.select import explain, format_selection  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LOOM_CPU_RESIDENT_BLOCKS", raising=False)
    loom.registry.set_selector(None)
    yield tmp_path
    _native.registry_clear("user")


def _select(tmp_path, *arguments: str, **extra_env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "LOOM_CPU_RESIDENT_BLOCKS"}
    environment.update(LOOM_CACHE_DIR=str(tmp_path), **extra_env)
    command = [sys.executable, "-m", "loom", "select", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment, check=False)


def test_a_bundled_plan_anywhere_and_a_jit_plan_where_it_does_not_fit(cache):
    anywhere = explain("allgather", 16384, world_size=4)
    assert (anywhere.plan, anywhere.source, anywhere.thread_blocks) == (
        "allgather_fullmesh_4r_16384_23170",
        "bundled table",
        64,
    )
    assert anywhere.passed_over == []
    shared = explain("allgather", 16384, world_size=4, placement=(4, 131))
    assert shared.source == "JIT" and shared.plan.startswith("allgather_fullmesh_4r_16384_23170_i")
    assert shared.thread_blocks <= 32
    assert shared.passed_over == [
        (
            "allgather_fullmesh_4r_16384_23170",
            "64 thread blocks per rank, but 4 ranks sharing the GPU may run at most 32 each (the GPU holds 131"
            " interpreter blocks at once)",
        )
    ]
    assert "passed over allgather_fullmesh_4r_16384_23170: 64 thread blocks" in format_selection(shared)


def test_a_user_plan_comes_before_the_bundled_table(cache, tmp_path):
    from loom.compiler.driver import compile_algorithm

    text = compile_algorithm(
        "allgather_fullmesh_packet", 4, plan_name="mine", min_message_size=0, max_message_size=1 << 16
    )
    loom.register_plan(_native.Plan.parse(text))
    chosen = explain("allgather", 16384, world_size=4)
    assert (chosen.plan, chosen.source) == ("mine", "user plan")


def test_the_command_with_and_without_a_placement(tmp_path):
    bundled = _select(tmp_path, "--collective", "allgather", "--bytes", "16384", "--world-size", "4", "--host-only")
    assert bundled.returncode == 0, bundled.stderr
    assert bundled.stdout.splitlines()[:2] == ["plan:    allgather_fullmesh_4r_16384_23170", "source:  bundled table"]
    placed = _select(
        tmp_path, "--collective", "allgather", "--bytes", "16384", "--world-size", "4", "--host-only",
        LOOM_CPU_RESIDENT_BLOCKS="128",
    )  # fmt: skip
    assert placed.returncode == 0, placed.stderr
    assert placed.stdout.startswith("plan:    allgather_fullmesh_4r_16384_23170_i"), placed.stdout
    assert "source:  JIT" in placed.stdout and "passed over allgather_fullmesh_4r_16384_23170" in placed.stdout
    none = _select(tmp_path, "--collective", "allreduce", "--bytes", "4096", "--world-size", "12", "--host-only")
    assert none.returncode == 3 and "plan:    (none)" in none.stdout, none.stdout + none.stderr
