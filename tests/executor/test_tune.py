"""`loom tune` (issue 55): measure this machine, write <cache>/tuned/<machine key>.json, and have the selector
take it before the bundled table (LOOM_TUNED=0 ignores it); `loom select` says so. On the CPU backend here
(ranks on threads, and as processes); on one GPU in test_shared_gpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("loom._native", reason="the native module is not built")

TUNE = ["--host-only", "--world-size", "4", "--collectives", "allreduce", "--max-bytes", "1MiB", "--no-progress"]


def _loom(tmp_path, *arguments: str, timeout: int = 600, **extra_env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LOOM_CPU_RESIDENT")}
    environment.update(LOOM_CACHE_DIR=str(tmp_path), **extra_env)
    command = [sys.executable, "-m", "loom", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, check=False)


def _python(tmp_path, program: str, **extra_env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "LOOM_CACHE_DIR": str(tmp_path), **extra_env}
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=300, env=environment, check=False
    )


CHOSEN = """
import json, numpy as np, loom
from loom.runtime.host_ranks import run_ranks
def body(bootstrap):
    comm = loom.Communicator(bootstrap, host_only=True)
    data = np.full(4096, comm.rank + 1, np.float32)
    comm.all_reduce(data)
    plan = loom.registry.select("allreduce", 16384, "float32", 4, 4, inplace=True)
    return float(data[0]), plan.name, [e.source for e in loom.registry.list_plans("allreduce", 4, "tuned")]
print(json.dumps(sorted(run_ranks(4, None, body).values())))
"""


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    root = tmp_path_factory.mktemp("tune")
    started = time.monotonic()
    done = _loom(root, "tune", *TUNE)
    return root, done, time.monotonic() - started


def test_tune_on_the_cpu_backend_writes_a_table_in_under_five_minutes(tuned):
    root, done, seconds = tuned
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert seconds < 300, seconds
    table_path = root / "tuned" / "cpu_w4_r4.json"
    table = json.loads(table_path.read_text())
    assert table["machine"] == {"backend": "cpu", "gpu": "", "gpus": 0, "world_size": 4, "ranks_per_node": 4}
    rows = [row for row in table["rows"] if row["collective"] == "allreduce"]
    assert rows[-1]["max_bytes"] == 1 << 20
    ranges = sorted({(row["min_bytes"], row["max_bytes"]) for row in rows})
    for (_, before_max), (after_min, _) in zip(ranges, ranges[1:], strict=False):
        assert after_min > before_max  # no size in two rows (a gap, where no winner reaches, is the bundled table's)
    for low, high in ranges:  # every range has its plan out of place and in place
        files = [row["plan"] for row in rows if (row["min_bytes"], row["max_bytes"]) == (low, high)]
        assert len(files) == 2 and sum(file.endswith("_inplace.json") for file in files) == 1, files
    for size in [m["bytes"] for m in table["measurements"]]:
        assert any(low <= size <= high for low, high in ranges), size  # every measured size has a row
    for row in rows:
        plan = json.loads((root / "tuned" / "cpu_w4_r4" / row["plan"]).read_text())
        assert plan["collective"] == "allreduce" and plan["world_size"] == 4
        assert plan["min_message_bytes"] <= row["min_bytes"] and row["max_bytes"] <= plan["max_message_bytes"]
    sizes = [m["bytes"] for m in table["measurements"]]
    assert sizes == [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20]
    for measurement in table["measurements"]:
        assert measurement["bundled"] in measurement["times_us"], measurement  # the bundled choice was timed
        assert len(measurement["times_us"]) >= 3
    assert (root / "tuned" / "cpu_w4_r4.png").stat().st_size > 1000
    assert "CPU backend: the times are host costs" in done.stdout


def test_the_selector_takes_the_tuned_table_before_the_bundled_one(tuned):
    root, done, _ = tuned
    assert done.returncode == 0
    table = json.loads((root / "tuned" / "cpu_w4_r4.json").read_text())
    expected = next(
        row
        for row in table["rows"]
        if row["min_bytes"] <= 16384 <= row["max_bytes"] and row["plan"].endswith("_inplace.json")
    )
    ran = _python(root, CHOSEN)
    assert ran.returncode == 0, ran.stderr[-3000:]
    for value, name, sources in json.loads(ran.stdout):
        assert value == 10.0
        assert name == expected["plan"].removesuffix(".json"), (name, expected)
        assert sources and set(sources) == {"tuned"}
    ignored = _python(root, CHOSEN, LOOM_TUNED="0")
    assert ignored.returncode == 0, ignored.stderr[-3000:]
    for value, name, sources in json.loads(ignored.stdout):
        assert value == 10.0 and sources == [] and not name.startswith("tuned_"), name


def test_loom_select_says_a_plan_comes_from_the_tuned_table(tuned):
    root, done, _ = tuned
    assert done.returncode == 0
    arguments = ["select", "--collective", "allreduce", "--bytes", "16384", "--world-size", "4", "--host-only"]
    with_table = _loom(root, *arguments)
    assert with_table.returncode == 0, with_table.stderr
    assert "source:  tuned table" in with_table.stdout and "plan:    tuned_" in with_table.stdout, with_table.stdout
    without = _loom(root, *arguments, LOOM_TUNED="0")
    assert "source:  bundled table" in without.stdout, without.stdout


def test_every_plan_in_a_table_fits_the_placement_it_was_tuned_for(tmp_path):
    done = _loom(
        tmp_path, "tune", "--host-only", "--world-size", "4", "--collectives", "allgather", "--max-bytes", "64K",
        "--quick", "--no-progress", LOOM_CPU_RESIDENT_BLOCKS="32",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = json.loads((tmp_path / "tuned" / "cpu_w4_r4.json").read_text())
    for row in table["rows"]:
        plan = json.loads((tmp_path / "tuned" / "cpu_w4_r4" / row["plan"]).read_text())
        assert max(len(gpu["threadblocks"]) for gpu in plan["gpus"]) <= 32 // 4, row


def test_tune_with_ranks_as_processes(tmp_path):
    done = _loom(
        tmp_path, "tune", "--host-only", "--processes", "--world-size", "2", "--collectives", "allgather",
        "--max-bytes", "16K", "--quick", "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = json.loads((tmp_path / "tuned" / "cpu_w2_r2.json").read_text())
    assert table["rows"] and table["machine"]["world_size"] == 2


def test_bad_arguments_are_named(tmp_path):
    done = _loom(tmp_path, "tune", "--host-only", "--world-size", "4", "--collectives", "gossip", "--no-progress")
    assert done.returncode != 0 and "collectives: 'gossip' is not one of" in done.stderr, done.stderr
