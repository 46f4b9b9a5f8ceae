"""The tests run ranks on threads with the package's helper (loom.runtime.host_ranks)."""

from loom.runtime.host_ranks import run_ranks

__all__ = ["run_ranks"]
