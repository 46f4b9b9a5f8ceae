"""bench/uneven_splits.py: the all-to-all-v benchmark's split matrices."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from uneven_splits import uneven_splits  # noqa: E402


def test_rows_sum_to_the_total_with_empty_peers_and_every_rank_draws_the_same():
    for world in (2, 3, 4, 8):
        for total in (0, 1, 7, 1000, 1 << 20):
            matrix = uneven_splits(total, world, random.Random(world * 31 + total))
            assert matrix == uneven_splits(total, world, random.Random(world * 31 + total))
            assert len(matrix) == world and all(len(row) == world for row in matrix)
            assert all(sum(row) == total and min(row) >= 0 for row in matrix)
    big = uneven_splits(1 << 20, 8, random.Random(1))
    assert any(0 in row for row in big) and len({count for row in big for count in row}) > 8
