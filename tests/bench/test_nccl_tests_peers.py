"""bench/nccl_tests_peers.py without GPUs: the sides take turns and keep their medians, and the table puts Loom's
time over the fastest other library's (the runs themselves need GPUs: scripts/multi_gpu_run.sh mscclpp)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("nccl_tests_peers", ROOT / "bench" / "nccl_tests_peers.py")
nccl_tests_peers = importlib.util.module_from_spec(_spec)
sys.modules["nccl_tests_peers"] = nccl_tests_peers
_spec.loader.exec_module(nccl_tests_peers)


def _row(size: int, us: float, wrong: str = "0") -> dict:
    times = {"out_of_place_us": us, "in_place_us": us}
    return {"bytes": size, **times, "out_of_place_wrong": wrong, "in_place_wrong": wrong}


def test_every_side_takes_its_turn_and_keeps_the_median_of_its_rounds():
    order = []
    times = {"nccl": iter([10.0, 12.0, 11.0]), "loom": iter([5.0, 7.0, 6.0]), "mscclpp": iter([9.0, 8.0, 30.0])}

    def run(side):
        order.append(side)
        return [_row(1024, next(times[side]))]

    rows = nccl_tests_peers.in_turns(3, run, {"nccl": "nccl", "loom": "loom", "mscclpp": "mscclpp"})
    assert order == ["nccl", "loom", "mscclpp"] * 3
    assert {name: side[0]["out_of_place_us"] for name, side in rows.items()} == {
        "nccl": 11.0,
        "loom": 6.0,
        "mscclpp": 9.0,
    }


def test_the_table_puts_loom_over_the_fastest_peer_and_shows_wrong_elements():
    rows = {
        "nccl": [_row(1024, 10.0), _row(1 << 20, 40.0)],
        "loom": [_row(1024, 4.0), _row(1 << 20, 30.0, "2")],
        "mscclpp": [_row(1024, 8.0), _row(1 << 20, 20.0)],
    }
    lines = nccl_tests_peers.table("all_reduce_perf", rows).splitlines()
    assert lines[2] == "| size | nccl | loom | mscclpp | Loom / best peer |"
    assert lines[4] == "| 1 KiB | 10.00 (0) | 4.00 (0) | 8.00 (0) | 0.50 |"
    assert lines[5] == "| 1 MiB | 40.00 (0) | 30.00 (2) | 20.00 (0) | 1.50 |"


def test_mscclpp_runs_only_when_its_library_is_given():
    args = nccl_tests_peers.arguments(["--nproc", "2"])
    assert args.mscclpp == "" and args.programs.split(",")[0] == "all_reduce_perf"
