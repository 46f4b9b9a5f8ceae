"""Seeded all-to-all-v calls and their NumPy reference, shared by the thread and process tests.

``counts[s][r]`` is how many rows rank s sends to rank r; rank s's input holds its pieces back to back in
rank order, and rank r's output receives them back to back in sender order.
"""

from __future__ import annotations

import numpy as np

COLUMNS = 3  # rows of 3 float32: 12-byte rows, so entries start and end off 16-byte boundaries


def random_counts(seed: int, world: int, most: int = 40) -> np.ndarray:
    """Row counts with about a fifth of the pairs (self included) at zero."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, most, size=(world, world))
    counts[rng.random((world, world)) < 0.2] = 0
    return counts


def rank_input(seed: int, sender: int, counts: np.ndarray) -> np.ndarray:
    rows = int(counts[sender].sum())
    return np.random.default_rng([seed, sender]).standard_normal((rows, COLUMNS)).astype(np.float32)


def expected_output(seed: int, receiver: int, counts: np.ndarray) -> np.ndarray:
    pieces = []
    for sender in range(counts.shape[0]):
        start = int(counts[sender, :receiver].sum())
        pieces.append(rank_input(seed, sender, counts)[start : start + int(counts[sender, receiver])])
    return np.concatenate(pieces).reshape(-1, COLUMNS)


__all__ = ["COLUMNS", "expected_output", "random_counts", "rank_input"]
