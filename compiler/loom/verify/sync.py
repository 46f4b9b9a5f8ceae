"""Synchronisation state: channel signals, semaphores and barriers, each carrying vector clocks.

- ``signal`` on channel ``c`` of rank ``r`` adds one to the semaphore that the paired channel's
  ``wait`` watches (docs/plan-format.md, "Pairing"); a ``wait`` takes one, or blocks. A signal
  carries the signaller's clock, so the waiter learns everything the signaller did before.
- ``relaxed`` on a memory channel (the executor's ``relaxedSignal`` / ``relaxedWait``: a relaxed atomic add,
  and a spin without the acquiring load) orders nothing but the count. What it still orders is what the
  kernel boundary ordered: the signaller's steps before its call began (its earlier calls, the user's reads
  between calls). So a relaxed signal carries the signaller's clock at the start of its call, and a relaxed
  wait learns only that much of the signal it takes: the cross-call handshake stays right, and a relaxed
  signal (or wait) that is to publish data of this call leaves the data's reads racing. A port channel's
  signal is the proxy's, which orders its copies whatever the op says.
- ``sem_release`` adds one to a semaphore of the rank, ``sem_acquire`` takes one or blocks; the
  ``initial_value`` tokens carry no clock.
- ``barrier``: the ``k``-th arrival of each listed thread block at barrier ``id`` meet; each
  leaves with the clocks of all of them.

Counters live across calls, as on the GPU, so a signal one call leaves over satisfies a wait of
the next: ``leftovers`` lists them at the end.
"""

from __future__ import annotations

from collections import defaultdict, deque

from loom.verify.program import Program, Step
from loom.verify.races import Clock, merge


class Sync:
    def __init__(self, program: Program) -> None:
        self.program = program
        # (rank, channel) -> signals that arrived and no wait took yet: (clock, the signal step)
        self.signals: dict[tuple[int, int], deque] = defaultdict(deque)
        self.lost: list[tuple[Step, int]] = []  # signals on channels that pair with nothing
        self.semaphores: dict[tuple[int, int], deque] = defaultdict(deque)
        for key, initial in program.semaphores.items():
            self.semaphores[key].extend(({}, None) for _ in range(initial))
        self.generation: dict[tuple, int] = defaultdict(int)  # (rank, barrier, tb) -> barriers passed
        self.arrivals: dict[tuple, dict[int, Clock]] = defaultdict(dict)  # (rank, barrier, generation)

    # -- channels --

    def signal(self, step: Step, clocks: dict[int, Clock], call_start: Clock) -> None:
        """``clocks``: what each channel's signal carries; ``call_start``: what a relaxed one still orders."""
        for channel in step.signals:
            end = self.program.paired.get((step.rank, channel))
            if end is None:
                self.lost.append((step, channel))
            else:
                self.signals[end].append((dict(clocks[channel]), step, dict(call_start)))

    def can_wait(self, step: Step) -> bool:
        return all(self.signals[(step.rank, channel)] for channel in step.waits)

    def wait(self, step: Step, clock: Clock) -> None:
        for channel in step.waits:
            carried, _, call_start = self.signals[(step.rank, channel)].popleft()
            merge(clock, call_start if self.relaxed_end(step, channel) else carried)

    def relaxed_end(self, step: Step, channel: int) -> bool:
        """A relaxed signal or wait on a memory channel (a port channel's proxy orders its copies)."""
        kind = self.program.channels.get((step.rank, channel), {}).get("type")
        return bool(step.op.get("relaxed")) and kind != "port"

    # -- semaphores --

    def release(self, step: Step, clock: Clock) -> None:
        for semaphore in step.releases:
            self.semaphores[(step.rank, semaphore)].append((dict(clock), step))

    def can_acquire(self, step: Step) -> bool:
        return all(self.semaphores[(step.rank, semaphore)] for semaphore in step.acquires)

    def acquire(self, step: Step, clock: Clock) -> None:
        for semaphore in step.acquires:
            merge(clock, self.semaphores[(step.rank, semaphore)].popleft()[0])

    # -- barriers --

    def _meeting(self, step: Step) -> tuple:
        barrier_id = step.barrier[0]
        return (step.rank, barrier_id, self.generation[(step.rank, barrier_id, step.tb)])

    def arrive(self, step: Step, clock: Clock) -> bool:
        """Register the arrival (once); True when every listed thread block is there."""
        arrived = self.arrivals[self._meeting(step)]
        arrived.setdefault(step.tb, dict(clock))
        return step.barrier[1] <= arrived.keys()

    def arrived(self, step: Step) -> set[int]:
        return set(self.arrivals.get(self._meeting(step), {}))

    def leave(self, step: Step, clock: Clock) -> None:
        meeting = self._meeting(step)
        for other in self.arrivals[meeting].values():
            merge(clock, other)
        self.generation[(step.rank, step.barrier[0], step.tb)] += 1

    # -- the end --

    def leftovers(self, calls: int) -> list[tuple[Step, str]]:
        """(a signal or release no wait or acquire took, what it is) after the last call."""
        out = []
        for (rank, channel), queue in sorted(self.signals.items()):
            if queue:
                sender = next(end for end, target in self.program.paired.items() if target == (rank, channel))
                what = (
                    f"signals ch{sender[1]} {len(queue)} time(s) more than rank {rank} waits on the paired"
                    f" ch{channel}, over {calls} calls: a later wait there passes before what it guards is done"
                )
                out.append((queue[0][1], what))
        for step, channel in self.lost:
            out.append((step, f"signals ch{channel}, which pairs with no channel of its peer: no wait can take it"))
        for (rank, semaphore), queue in sorted(self.semaphores.items()):
            surplus = len(queue) - self.program.semaphores.get((rank, semaphore), 0)
            released = [step for _, step in queue if step is not None]
            if surplus > 0 and released:
                what = (
                    f"releases sem{semaphore} {surplus} time(s) more than rank {rank} acquires it, over {calls}"
                    " calls: a later acquire passes before what it guards is done"
                )
                out.append((released[0], what))
        return out
