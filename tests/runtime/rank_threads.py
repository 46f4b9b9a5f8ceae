"""The tests run ranks on threads with the package's helper (loom.host_ranks)."""

from loom.host_ranks import run_ranks

__all__ = ["run_ranks"]
