"""The tests run ranks on threads with the package's helper (loom.runtime.host_ranks)."""

from loom.runtime.host_ranks import run_ranks


def run_local_ranks(world: int, body, timeout_ms: int = 30000) -> dict:
    """``body(bootstrap)`` on ``world`` threads of a job on 127.0.0.1; re-raises the first rank's failure."""
    from loom import _native

    results = run_ranks(world, _native.UniqueId.create("127.0.0.1"), body, timeout_ms=timeout_ms)
    for rank in range(world):
        if isinstance(results[rank], BaseException):
            raise results[rank]
    return results


__all__ = ["run_local_ranks", "run_ranks"]
