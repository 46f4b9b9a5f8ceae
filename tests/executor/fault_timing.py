"""What the fault tests' ranks share: a rank that SIGKILLs itself at a known time, and a watchdog thread that
asks a communicator for its asynchronous error, as torch's watchdog asks NCCL (tests/executor and
tests/nccl/gpu import it)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable


def die(delay_s: float, note: Callable[[float], None]) -> None:
    """Sleeps ``delay_s``, hands the time of death to ``note`` (a report line, a stamp file), then SIGKILLs
    this process."""
    time.sleep(delay_s)
    note(time.time())
    os.kill(os.getpid(), signal.SIGKILL)


def die_soon(delay_s: float, note: Callable[[float], None]) -> None:
    """die() on a second thread: the main thread is inside a call when it comes."""
    threading.Thread(target=die, args=(delay_s, note), daemon=True).start()


def write_stamp(path: object) -> Callable[[float], None]:
    """A ``note`` for die() that writes the time into ``path`` (the survivors read it)."""

    def note(at: float) -> None:
        with open(path, "w", encoding="utf-8") as stamp:
            stamp.write(repr(at))

    return note


class ErrorWatch:
    """A thread that asks ``error()`` every 50 ms until it answers; ``at`` and ``message`` say when and what."""

    def __init__(self, error: Callable[[], object]) -> None:
        self.at: float | None = None
        self.message: str | None = None
        self._stopped = False
        threading.Thread(target=self._run, args=(error,), daemon=True).start()

    def _run(self, error: Callable[[], object]) -> None:
        while self.at is None and not self._stopped:
            found = error()
            if found is not None:
                self.message, self.at = str(found), time.time()
            time.sleep(0.05)

    def stop(self) -> None:
        time.sleep(0.1)  # its next look first
        self._stopped = True
