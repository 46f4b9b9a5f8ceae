"""`loom demo`: the README's main command. On the CPU backend here (4 ranks on host threads); on GPUs in
test_executor_gpu.py."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest
from loom.tools import demo

pytest.importorskip("loom._native", reason="the native module is not built")


def _demo(tmp_path, *arguments: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LOOM_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "loom", "demo", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=False)


def test_the_demo_runs_the_whole_path_on_the_cpu_backend(tmp_path):
    first = _demo(tmp_path, "--cpu", "--sizes", "1K,256K", "--repeats", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    assert lines[0] == "loom demo: CPU backend, 4 ranks (asked for with --cpu)"
    assert "1. compile   demo_allreduce.py for 4 ranks: compiled in" in first.stdout
    assert "2. verify    demo_allreduce_packets_4r: computes the all-reduce" in first.stdout
    assert "3. register  demo_allreduce_packets_4r as a user plan (all-reduce up to 64 KiB, in place)" in first.stdout
    table = {tuple(line.split()[:3]): line.split()[3] for line in lines if line.startswith("  all-")}
    # The selector takes the demo plan where it fits, the bundled plans (installed on first use) elsewhere.
    assert table[("all-reduce", "1", "KiB")] == "demo_allreduce_packets_4r"
    assert (
        table[("all-reduce", "256", "KiB")].startswith("allreduce_") and "_4r_" in table[("all-reduce", "256", "KiB")]
    )
    assert table[("all-gather", "1", "KiB")].startswith("allgather_fullmesh_packet_4r")
    assert lines[-1] == "ok: 4 of 4 results matched the float64 reference"
    assert any((tmp_path / "cache" / "default").glob("*.json.gz"))
    # The second run reads the plan back from the JIT cache.
    second = _demo(tmp_path, "--cpu", "--sizes", "1K", "--repeats", "1")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "compile   demo_allreduce.py for 4 ranks: read back from the JIT cache" in second.stdout


def test_the_demo_selector_prefers_the_demo_plan():
    plan = argparse.Namespace
    demo_plan, bundled = plan(name="demo_allreduce_packets_2r"), plan(name="allreduce_allpairs_packet_2r")
    assert demo.demo_selector(plan(candidates=[bundled, demo_plan])) is demo_plan
    assert demo.demo_selector(plan(candidates=[bundled])) is bundled
    assert demo.demo_selector(plan(candidates=[])) is None


def test_sizes_read_as_bytes_with_binary_units():
    assert [demo.parse_size(text) for text in ("1K", "4M", "1G", "4096", "16KiB")] == [
        1024,
        4 << 20,
        1 << 30,
        4096,
        16384,
    ]
    for bad in ("3", "0", "1X", "-4"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a positive multiple of 4 bytes"):
            demo.parse_size(bad)
    assert demo.size_text(1024) == "1 KiB" and demo.size_text(1000) == "1000 B"


def test_without_gpus_the_demo_says_why_it_runs_on_the_cpu(monkeypatch):
    arguments = argparse.Namespace(cpu=False, gpus=None)
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    assert demo._usable_gpus(arguments) == (0, "torch is not installed: the GPU run needs it for tensors and for NCCL")
