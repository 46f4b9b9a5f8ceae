"""Runs the ranks of a job on threads of this process (the native calls release the GIL)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from loom import _native


def run_ranks(world: int, uid, body: Callable, ranks=None, timeout_ms: int = 10000) -> dict[int, object]:
    """Runs body(bootstrap) for each rank on its own thread; returns each rank's result or exception."""
    results: dict[int, object] = {}

    def run(rank: int) -> None:
        try:
            with _native.Bootstrap(rank, world, uid, timeout_ms=timeout_ms) as bootstrap:
                results[rank] = body(bootstrap)
        except Exception as error:
            results[rank] = error

    threads = [threading.Thread(target=run, args=(r,)) for r in (range(world) if ranks is None else ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a rank hung"
    return results
