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


def mismatched_calls(plan: object, sent: int, calls: int = 2) -> dict[int, list[Exception]]:
    """Two ranks as threads (CPU backend) run ``calls`` counted calls of ``plan`` in which rank 0 sends ``sent``
    bytes to rank 1, which posts a 16-byte receive entry: each rank's errors, in call order."""
    import loom
    from loom import _native
    from loom.errors import LoomError
    from rank_threads import run_local_ranks

    def body(bootstrap: object) -> list[Exception]:
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        source, output = np.ones(64, np.float32), np.zeros(64, np.float32)
        sends = [(0, 16), (16, sent if bootstrap.rank == 0 else 16)]
        receives = [(0, 16), (16, 16)]
        errors = []
        for _ in range(calls):  # after the first, a rank out of step refuses at once
            try:
                executor.execute_counted(plan, source, output, sends=sends, receives=receives)
            except LoomError as error:
                errors.append(error)
        return errors

    return run_local_ranks(2, body, timeout_ms=20000)


__all__ = ["COLUMNS", "expected_output", "mismatched_calls", "random_counts", "rank_input"]
