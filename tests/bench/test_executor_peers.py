"""bench/executor_peers.py's driver without GPUs: what it reads from MSCCL++'s executor_test, and the medians
it keeps when both sides take turns (the sides themselves need GPUs: scripts/multi_gpu_run.sh mscclpp)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "compiler"))
sys.path.insert(0, str(ROOT / "tests" / "compiler" / "interop"))
from test_mscclpp_plan import packet_allreduce  # noqa: E402

_spec = importlib.util.spec_from_file_location("executor_peers", ROOT / "bench" / "executor_peers.py")
executor_peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(executor_peers)


def test_the_slowest_rank_of_executor_tests_output_is_the_call_time():
    output = "warming up\nRank 1: 1048576 bytes 12.5 us\nRank 0: 1048576 bytes 11.25 us\n"
    assert executor_peers.parse_executor_test(output) == 12.5
    with pytest.raises(RuntimeError, match="no result line"):
        executor_peers.parse_executor_test("MSCCLPP error: no GPU\n")


def test_the_driver_imports_the_plan_once_and_keeps_each_sides_median(tmp_path, monkeypatch):
    plan = tmp_path / "allreduce_packet.json"
    plan.write_text(json.dumps(packet_allreduce()))
    mscclpp = iter([10.0, 1.0, 30.0, 3.0, 20.0, 2.0])  # rounds of (1024 B, 4096 B)
    loom = iter([{1024: 9.0, 4096: 2.5}, {1024: 11.0, 4096: 1.5}, {1024: 10.0, 4096: 2.0}])
    imported = []

    def fake_loom(args, loom_plan, scratch):
        imported.append(json.loads(Path(loom_plan).read_text())["name"])
        return {size: {"us": us, "error": 1e-4} for size, us in next(loom).items()}

    monkeypatch.setattr(executor_peers, "run_loom", fake_loom)
    monkeypatch.setattr(executor_peers, "run_mscclpp", lambda args, path, size: next(mscclpp))
    args = executor_peers.arguments(
        ["--plans", str(plan), "--executor-test", "executor_test", "--sizes", "1024,4096", "--rounds", "3"]
    )
    rows = executor_peers.drive(args)
    assert len(set(imported)) == 1 and len(imported) == 3
    assert [(row["bytes"], row["loom_us"], row["mscclpp_us"]) for row in rows] == [(1024, 10.0, 20.0), (4096, 2.0, 2.0)]
    assert rows[0]["loom_over_mscclpp"] == 0.5 and rows[0]["loom_relative_error"] == 1e-4
