"""What the deadlock explainer and the postcondition check read of a run in progress: a Protocol, so
that they depend on the state's shape and not on the scheduler that holds it (which calls them)."""

from __future__ import annotations

from typing import Protocol

from loom.verify.memory import Memory
from loom.verify.program import Program, Step
from loom.verify.report import FindingLog
from loom.verify.sync import Sync


class RunState(Protocol):
    """The scheduler's state (``loom.verify.schedule.Executor`` is one)."""

    program: Program
    calls: int
    log: FindingLog
    memory: Memory
    sync: Sync
    call: dict[int, int]  # rank -> the call it is in
    senders: dict[tuple[int, int], int]  # send/recv: (call, rank) -> the rank whose input it received

    def blocked_step(self, block: tuple[int, int]) -> Step | None: ...
