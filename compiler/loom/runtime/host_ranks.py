"""Run the ranks of a job on threads of this process: how the CPU backend runs a whole job in one
process (the demo without GPUs, the tests). The native calls release the GIL, so ranks run in parallel.

    results = run_ranks(4, None, lambda bootstrap: loom.Communicator(bootstrap, host_only=True).rank)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from loom.errors import LoomTimeoutError
from loom.native import native_module

JOIN_TIMEOUT_S = 60.0


def run_ranks(
    world: int,
    uid: object,
    body: Callable[[object], object],
    ranks: Iterable[int] | None = None,
    timeout_ms: int = 10000,
    join_timeout_s: float = JOIN_TIMEOUT_S,
) -> dict[int, object]:
    """Run ``body(bootstrap)`` for each rank (default: all of ``range(world)``) on its own thread.

    ``uid`` is the job's ``UniqueId`` (None: a new one on 127.0.0.1); ``timeout_ms`` bounds every
    bootstrap wait. Returns each rank's result, or the exception it raised. A rank still running after
    ``join_timeout_s`` raises LoomTimeoutError naming it.
    """
    native = native_module()
    uid = native.UniqueId.create("127.0.0.1") if uid is None else uid
    results: dict[int, object] = {}

    def run(rank: int) -> None:
        try:
            with native.Bootstrap(rank, world, uid, timeout_ms=timeout_ms) as bootstrap:
                results[rank] = body(bootstrap)
        except Exception as error:
            results[rank] = error

    chosen = range(world) if ranks is None else ranks
    threads = {rank: threading.Thread(target=run, args=(rank,), daemon=True) for rank in chosen}
    for thread in threads.values():
        thread.start()
    for thread in threads.values():
        thread.join(join_timeout_s)
    hung = [rank for rank, thread in threads.items() if thread.is_alive()]
    if hung:
        raise LoomTimeoutError(f"ranks {hung} still ran after {join_timeout_s:g} s")
    return results


__all__ = ["run_ranks"]
