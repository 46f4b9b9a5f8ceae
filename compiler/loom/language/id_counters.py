"""MSCCL++'s channel and semaphore classes number their objects with class-level counters, and
``CollectiveProgram.__exit__`` resets them with ``reset()``; programs and tools call it too. Loom numbers
channels and semaphores per program, so there is nothing to reset: the method exists so that such code
runs unchanged."""

from __future__ import annotations


class NumberedPerProgram:
    """Base of the DSL classes whose ids are numbered per program (channels, semaphores)."""

    @classmethod
    def reset(cls) -> None:
        """Nothing to do: ids start again with every CollectiveProgram (MSCCL++ resets class counters)."""
