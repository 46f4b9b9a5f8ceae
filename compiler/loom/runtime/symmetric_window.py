"""``SymmetricWindow``: a tensor every rank registered together (``Communicator.register``).

Calls whose buffers lie in windows exchange no addresses between the ranks: after the first call of a
plan on a pair of windows, where the ranks check that their buffers lie at the same offsets, a peer's
buffer is found from its window's base and this rank's offset (docs/executor.md, "Symmetric windows").
The promise the caller makes, as with NCCL's ``NCCL_WIN_COLL_SYMMETRIC`` windows: every rank registers
a tensor of the same bytes at the same call, and a call's buffers lie at the same offsets of the same
windows on every rank.
"""

from __future__ import annotations

from loom.errors import InvalidArgumentError


class SymmetricWindow:
    def __init__(self, executor: object, tensor: object, handle: int) -> None:
        self._executor = executor
        self.tensor = tensor  # kept alive while registered: peers map its memory
        self.handle = handle

    @property
    def registered(self) -> bool:
        return self._executor is not None

    def close(self) -> None:
        """Collective: waits for the calls in flight and deregisters the window (a second close does nothing)."""
        if self._executor is None:
            return
        executor, self._executor = self._executor, None
        executor.deregister_window(self.handle)

    def __enter__(self) -> SymmetricWindow:
        if self._executor is None:
            raise InvalidArgumentError(f"window {self.handle}: it was deregistered")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
