"""bench/tune_plans.py: the candidate grid, and the table a set of measurements chooses (pure Python; the
measurements themselves need GPUs: scripts/multi_gpu_run.sh tune)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "compiler"))
from loom.algorithms import ALGORITHMS, GiB, KiB, MiB  # noqa: E402
from loom.algorithms.tuned_sizes import scaled, table_for  # noqa: E402

_spec = importlib.util.spec_from_file_location("tune_plans", ROOT / "bench" / "tune_plans.py")
tune_plans = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tune_plans)


def _row(collective: str, size: int, plan: str, us: float, difference: float = 0.0) -> dict:
    return {"collective": collective, "bytes": size, "plan": plan, "loom_us": us, "max_relative_difference": difference}


@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_grid_covers_every_collective_and_size_with_candidates_the_world_size_supports(world):
    grid = tune_plans.candidate_grid(world)
    names = [tune_plans.candidate_name(world, *row[:3]) for row in grid]
    assert len(names) == len(set(names))
    for algorithm, instances, threads, low, high in grid:
        assert world in ALGORITHMS[algorithm].world_sizes
        assert instances >= 1 and threads in (256, 512, 1024) and low < high
        assert tune_plans.parse_candidate_name(tune_plans.candidate_name(world, algorithm, instances, threads)) == (
            algorithm,
            instances,
            threads,
        )
    for collective in ("allreduce", "allgather", "reducescatter", "alltoall"):
        ranges = [(low, high) for algorithm, _, _, low, high in grid if ALGORITHMS[algorithm].collective == collective]
        for size in (1 * KiB, 64 * KiB, 1 * MiB, 64 * MiB, GiB):
            assert any(low <= size <= high for low, high in ranges), (collective, size)


def test_pick_merges_neighbouring_sizes_and_puts_boundaries_between_them():
    small = tune_plans.candidate_name(2, "allreduce_allpairs_packet", 4, 512)
    large = tune_plans.candidate_name(2, "allreduce_rs_ag", 64, 1024)
    rows = [_row("allreduce", 1 * KiB, small, 5.0), _row("allreduce", 1 * KiB, large, 9.0)]
    rows += [_row("allreduce", 16 * KiB, small, 5.5), _row("allreduce", 16 * KiB, large, 8.0)]
    rows += [_row("allreduce", 256 * KiB, small, 12.0), _row("allreduce", 256 * KiB, large, 10.0)]
    rows += [_row("allreduce", GiB, large, 3000.0)]
    table = tune_plans.pick(rows, 2)
    # 16 KiB and 256 KiB: the boundary is 64 KiB, halfway in log scale.
    assert table == [
        ("allreduce_allpairs_packet", 0, 64 * KiB, 4, 512),
        ("allreduce_rs_ag", 64 * KiB + 1, GiB, 64, 1024),
    ]


def test_pick_keeps_boundaries_within_the_winners_size_ranges_and_skips_wrong_results():
    packet = tune_plans.candidate_name(2, "allreduce_allpairs_packet", 8, 512)  # compiled up to 1 MiB
    rsag = tune_plans.candidate_name(2, "allreduce_rs_ag", 64, 1024)
    zero_copy = tune_plans.candidate_name(2, "allreduce_zero_copy", 64, 1024)
    rows = [_row("allreduce", 1 * MiB, packet, 10.0), _row("allreduce", 1 * MiB, rsag, 12.0)]
    rows += [_row("allreduce", 4 * MiB, rsag, 30.0), _row("allreduce", 4 * MiB, zero_copy, 20.0, difference=0.5)]
    table = tune_plans.pick(rows, 2)
    assert table == [
        ("allreduce_allpairs_packet", 0, 1 * MiB, 8, 512),  # not 2 MiB: the packet candidate stops at 1 MiB
        ("allreduce_rs_ag", 1 * MiB + 1, GiB, 64, 1024),  # zero copy was faster but wrong
    ]


def test_a_written_table_is_what_the_bundled_plans_and_the_benchmark_use(tmp_path, monkeypatch):
    import loom.algorithms.tuned_sizes as tuned_sizes

    path = tmp_path / "tuned_sizes.json"
    path.write_text(json.dumps({"2": json.loads(tuned_sizes.TABLE_FILE.read_text())["2"]}))
    monkeypatch.setattr(tuned_sizes, "TABLE_FILE", path)
    assert table_for(4) == scaled(tuned_sizes.TABLE, 4)  # no 4-rank table: the 2-rank one scaled
    rows = [("allreduce_allpairs_packet", 0, 64 * KiB, 2, 512), ("allreduce_rs_ag", 64 * KiB + 1, GiB, 16, 1024)]
    meta = {"device": "NVIDIA H200", "nccl": "2.28.9", "date": "2026-11-26", "fast_path": "1"}
    tune_plans.write_table(4, rows, meta, path)
    assert table_for(4) == rows
    assert table_for(2) == tuned_sizes.TABLE
    assert list(json.loads(path.read_text())) == ["2", "4"]


def test_pick_keeps_the_winner_of_the_size_below_when_it_is_within_the_tie_margin():
    one = tune_plans.candidate_name(2, "allreduce_allpairs_packet", 1, 256)
    eight = tune_plans.candidate_name(2, "allreduce_allpairs_packet", 8, 512)
    rows = [_row("allreduce", 1 * KiB, one, 5.0), _row("allreduce", 1 * KiB, eight, 6.0)]
    rows += [_row("allreduce", 4 * KiB, one, 5.1), _row("allreduce", 4 * KiB, eight, 5.0)]  # 2% apart: a tie
    rows += [_row("allreduce", 16 * KiB, one, 6.0), _row("allreduce", 16 * KiB, eight, 5.0)]  # 20%: not
    rows += [_row("allreduce", GiB, eight, 3000.0)]
    assert tune_plans.pick(rows, 2) == [
        ("allreduce_allpairs_packet", 0, 8 * KiB, 1, 256),
        ("allreduce_allpairs_packet", 8 * KiB + 1, GiB, 8, 512),
    ]


def test_pick_ties_large_sizes_within_a_narrower_margin():
    """From 32 MiB a 2 % lead is real (repeated replays agree to well under 1 %): the faster plan takes over."""
    i64 = tune_plans.candidate_name(4, "allreduce_rs_ag", 64, 512)
    i128 = tune_plans.candidate_name(4, "allreduce_rs_ag", 128, 512)
    rows = [_row("allreduce", 64 * MiB, i64, 305.5), _row("allreduce", 64 * MiB, i128, 306.0)]
    rows += [_row("allreduce", 128 * MiB, i64, 604.6), _row("allreduce", 128 * MiB, i128, 595.4)]  # 1.5 %
    rows += [_row("allreduce", GiB, i64, 4812.0), _row("allreduce", GiB, i128, 4693.9)]
    table = tune_plans.pick(rows, 4)
    assert [(row[0], row[3]) for row in table] == [("allreduce_rs_ag", 64), ("allreduce_rs_ag", 128)]
    assert table[0][1] == 0 and 64 * MiB <= table[0][2] < 128 * MiB
    assert table[1][1] == table[0][2] + 1 and table[1][2] == GiB


def test_scaling_a_table_merges_neighbouring_ranges_that_become_the_same_plan():
    rows = [
        ("allreduce_allpairs_packet", 0, 2048, 4, 512),
        ("allreduce_allpairs_packet", 2049, 32768, 8, 512),  # 4 and 8 both scale to 1 at 8 ranks
        ("allreduce_allpairs_packet", 32769, 131072, 16, 512),
        ("allreduce_zero_copy", 131073, GiB, 64, 512),
    ]
    assert scaled(rows, 8) == [
        ("allreduce_allpairs_packet", 0, 32768, 1, 512),
        ("allreduce_allpairs_packet", 32769, 131072, 2, 512),
        ("allreduce_zero_copy", 131073, GiB, 8, 512),
    ]
    assert scaled(rows, 2) == rows  # nothing scales, nothing merges


def _timed(collective: str, size: int, plan: str, loom_us: float, nccl_us: float) -> dict:
    row = _row(collective, size, plan, loom_us)
    busbw = size / 1e3  # any number: the report prints what the run recorded
    return {**row, "nccl_us": nccl_us, "loom_busbw_gbs": busbw / loom_us, "nccl_busbw_gbs": busbw / nccl_us}


def test_report_and_compare_print_the_fastest_candidate_of_each_size_beside_nccl():
    small = tune_plans.candidate_name(2, "allreduce_allpairs_packet", 4, 512)
    large = tune_plans.candidate_name(2, "allreduce_rs_ag", 64, 1024)
    before = [_timed("allreduce", KiB, small, 5.0, 10.0), _timed("allreduce", KiB, large, 9.0, 10.0)]
    before += [_timed("allreduce", GiB, large, 3200.0, 3400.0)]
    after = [_timed("allreduce", KiB, small, 4.0, 10.0), _timed("allreduce", GiB, large, 3000.0, 3300.0)]
    lines = tune_plans.report(before)
    assert lines[2] == "| allreduce | 1 KiB | 10.00 | 5.00 | 2.00 | 0 / 0 | `allreduce_allpairs_packet i4 t512` |"
    assert lines[3].startswith("| allreduce | 1 GiB | 3400.00 | 3200.00 | 1.06 |")
    assert "`allreduce_rs_ag i64 t1024`" in lines[3] and len(lines) == 4
    comparison = tune_plans.compare(before, after)
    assert comparison[2:] == [
        "| allreduce | 1 KiB | 5.00 (2.00) | 4.00 (2.50) | 0.80 |",
        "| allreduce | 1 GiB | 3200.00 (1.06) | 3000.00 (1.10) | 0.94 |",
    ]


def test_the_candidates_collective_bench_refines_are_the_fastest_timed_ones():
    rows = [_row("allreduce", KiB, "a", 5.0), _row("allreduce", KiB, "b", 4.0), {"plan": "c", "refused": "too wide"}]
    rows += [_row("allreduce", KiB, "d", 6.0)]
    assert tune_plans.fastest_candidates(rows, 2) == ["b", "a"]
    assert tune_plans.fastest_candidates(rows, 9) == ["b", "a", "d"]


def test_a_table_with_all_to_all_rows_gives_the_bundled_all_to_all_its_ranges(tmp_path, monkeypatch):
    import loom.algorithms.tuned_sizes as tuned_sizes

    spec = importlib.util.spec_from_file_location("build_default_plans", ROOT / "plans" / "build_default_plans.py")
    generator = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = generator  # dataclasses look their module up while the class is made
    spec.loader.exec_module(generator)
    path = tmp_path / "tuned_sizes.json"
    path.write_text(tuned_sizes.TABLE_FILE.read_text())
    monkeypatch.setattr(tuned_sizes, "TABLE_FILE", path)
    meta = {"device": "NVIDIA H200", "nccl": "2.28.9", "date": "2026-11-26", "fast_path": "1"}
    # The committed tables without their all-to-all rows; then the 4-rank one gets two.
    without = {world: [row for row in table_for(world) if row[0] != "alltoall_fullmesh"] for world in (2, 4)}
    tune_plans.write_table(2, without[2], meta, path)
    rows = [*without[4], ("alltoall_fullmesh", 0, MiB, 4, 512), ("alltoall_fullmesh", MiB + 1, GiB, 32, 1024)]
    tune_plans.write_table(4, rows, meta, path)

    def all_to_all(world: int) -> list[tuple[int, int, int, int]]:
        return [
            (plan.min_bytes, plan.max_bytes, plan.instances, plan.threads)
            for plan in generator.default_plans()
            if plan.algorithm == "alltoall_fullmesh"
            and plan.world_size == plan.ranks_per_node == world
            and not plan.inplace
        ]

    assert all_to_all(4) == [(0, MiB, 4, 512), (MiB + 1, GiB, 32, 1024)]
    assert all_to_all(2) == [(0, GiB, 1, 1024)]  # a table without all-to-all rows: one plan for every size
