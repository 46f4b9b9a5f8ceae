"""`loom demo`: the README's main command. On the CPU backend here (4 ranks on host threads), and on one GPU
(ranks sharing it); on several GPUs in test_executor_gpu.py."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from loom.tools import demo

pytest.importorskip("loom._native", reason="the native module is not built")
ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.gpu
def test_the_demo_on_one_gpu_runs_ranks_sharing_it_at_every_size(tmp_path):
    """The README's main command on a machine of one GPU: 2 and 4 ranks sharing it, every default size up to
    64 MiB, then world size 1 beside NCCL. The bundled 4-rank plans for larger sizes were tuned on GPUs of their
    own and have more blocks than 4 ranks keep resident on one GPU: the selector passes over them."""
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from test_runtime_gpu import GPUS

    if GPUS < 1:
        pytest.skip("needs a GPU, this host has none")
    pytest.importorskip("torch", reason="the GPU demo uses torch tensors and NCCL")
    done = _demo(tmp_path, "--gpus", "1", "--calls", "5")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert done.stdout.startswith("loom demo: 1 GPU: 2 and 4 ranks sharing it"), output[-6000:]
    for ranks in (2, 4):
        assert f"demo_allreduce_packets_{ranks}r" in done.stdout, output[-6000:]
    assert "64 MiB" in done.stdout, output[-6000:]
    last = done.stdout.rstrip().splitlines()[-1]
    assert last.startswith("ok: ") and last.endswith("results matched the float64 reference"), output[-6000:]
