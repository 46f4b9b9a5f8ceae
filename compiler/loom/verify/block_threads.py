"""The threads of one thread block, as the executor runs them: a data op is split over the block's threads
(unit ``i`` of every range goes to thread ``i`` modulo the block's size), and ops of one block are ordered
for its threads only by a block-wide sync. So when an op touches bytes that an earlier op of the same block
wrote (or writes bytes it read) and no sync lies between them, another thread may touch them first: a race,
whatever the ranges look like (the two ops may split them differently).

What syncs the block (executor/src/resolve.cc): a ``nop`` (before it), a ``barrier``, a ``signal``,
``wait``, ``flush``, ``sem_acquire`` or ``sem_release`` whose ``data_sync`` is not ``none`` (absent means
``both``), a put over a port channel (before the proxy gets it: a plain put before the op, a
reduce-and-send after its reduction) and a call's end (the kernel boundary). Reads of packets need none:
each thread polls the flags of the packets it reads.
"""

from __future__ import annotations

from loom.verify.program import Step
from loom.verify.report import FindingLog, finding_at

SYNC_OPS = {"signal", "wait", "flush", "sem_acquire", "sem_release"}


def syncs_before(step: Step) -> bool:
    if step.name in ("nop", "barrier"):
        return True
    if step.name in SYNC_OPS:
        return step.op.get("data_sync", "both") in ("before", "both")
    return bool(step.port_channels) and not step.reduces


def syncs_after(step: Step) -> bool:
    if step.name == "barrier":
        return True
    if step.name in SYNC_OPS:
        return step.op.get("data_sync", "both") in ("after", "both")
    return bool(step.port_channels) and step.reduces


class BlockThreads:
    """Per thread block, what its ops touched since its last block-wide sync: per location, the last op that
    wrote it and the ops that read it since."""

    def __init__(self, log: FindingLog) -> None:
        self.log = log
        self.since_sync: dict[tuple, dict[tuple, tuple[Step | None, list[Step]]]] = {}

    def sync(self, block: tuple) -> None:
        self.since_sync.pop(block, None)

    def access(self, step: Step, accesses: list[tuple[tuple, bool, str]], call: int) -> None:
        """``accesses``: (location, a write, its description) of ``step``'s threads."""
        touched = self.since_sync.setdefault(step.block, {})
        for key, write, described in accesses:
            writer, readers = touched.get(key, (None, []))
            other = writer if writer not in (None, step) else None
            if write and other is None:
                other = next((reader for reader in readers if reader is not step), None)
            if other is not None:
                self._report(step, other, other is writer, write, described, call)
            if write:
                touched[key] = (step, [])
            elif step not in readers:
                touched[key] = (writer, [*readers, step])

    def _report(self, step: Step, other: Step, other_wrote: bool, write: bool, described: str, call: int) -> None:
        message = (
            f"{'writes' if write else 'reads'} {described}, which {other.where()} ({other.text()})"
            f" {'wrote' if other_wrote else 'read'} in the same thread block with no block-wide sync between: the"
            " executor splits each op over the block's threads, so another thread may get there first; put a nop"
            " (or a sync op with data_sync) between them"
        )
        self.log.add(finding_at(step, "race", message, call), kind="threads of one block")
