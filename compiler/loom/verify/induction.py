"""Every call, not only the ones run: the inductive step.

The plan runs again in lockstep (every rank ends call ``c`` before any starts call ``c + 1``). At the start of
each call the executor's state is taken with its call numbers renamed away, as ``canonical_state`` says. When the
state at the start of call ``c + 1`` equals the state at the start of call ``c``, call ``c + 1`` runs as call ``c``
did (the executor decides from nothing else), ends in the same state again, and so on: no later call can find
what calls ``0 .. c`` did not. When the state still changes after ``limit`` calls, the plan is refused (``calls``).

Why lockstep covers ranks that run ahead: in a plan with no race, which signal a wait takes, which tokens an
acquire takes and which packets a poll reads are fixed by counts, not by timing, so every schedule has the same
happens-before order and the same accesses. A rank running ahead that overwrites a slower peer's data is an
access no synchronisation orders after the peer's, which the vector clocks report in lockstep as well (they
compare order, not the moment the executor ran the steps). The verifier's first run, with ranks running ahead,
stays: it names those problems in the calls where they happen.

Renaming. At the start of call ``c`` nothing the executor compares depends on the number ``c`` itself:
- call stamps (of values, of packets' flags, of contributions) are only ever compared with the current call, so
  every earlier call is one "past";
- an ``ll`` plan's scratch half is ``call % 2``: halves are renamed relative to the call;
- vector clocks are only compared with the count of an access still on record (the last write of a location and
  the reads since); an entry is renamed to how many of that block's recorded accesses it covers, which keeps
  every comparison, and every maximum taken when clocks merge.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict

from loom.verify.contents import Value
from loom.verify.program import Program
from loom.verify.races import Access, Clock
from loom.verify.report import Finding, FindingLog
from loom.verify.schedule import Executor

# The most calls the lockstep run takes to find a repeat. The bundled plans and library algorithms repeat at
# the start of call 2 (at 3 for an ll plan's two scratch halves).
DEFAULT_LIMIT = 6


def prove_every_call(program: Program, log: FindingLog, limit: int = DEFAULT_LIMIT) -> int | None:
    """Run ``program`` in lockstep until the state at the start of a call repeats; the call it repeats at, or
    None (refused with a ``calls`` finding, or findings of the lockstep run). Does nothing for a plan with
    findings already: it is refused."""
    if log.items:
        return None
    # One call more than the limit, so that the start of call `limit` is a boundary like the others (the last
    # boundary writes no input); the run ends there.
    executor = Executor(program, limit + 1, log, lockstep=True)
    states: list[dict] = []
    repeated: list[int] = []

    def at_call_start(call: int) -> bool:
        if log.items:
            return True
        state = canonical_state(executor, call)
        if states and states[-1] == state:
            repeated.append(call)
            return True
        states.append(state)
        return call >= limit

    executor.at_call_start = at_call_start
    executor.run()
    if repeated:
        return repeated[0]
    if not log.items:
        what = _first_difference(executor, states[-2], states[-1]) if len(states) > 1 else "it was not reached"
        message = (
            f"the state a call starts from still changes after {limit} calls ({what}), so the calls run do not show"
            " that every later call is right: each call must leave behind what the one before it did"
        )
        log.add(Finding("calls", 0, None, None, message))
    return None


def canonical_state(executor: Executor, call: int) -> dict:
    """What the rest of the run depends on at the start of ``call`` (every rank at its boundary), with the call
    numbers renamed away (the module's docstring): (component, key) -> value."""
    memory, sync = executor.memory, executor.sync
    levels = _ClockLevels(memory.accesses.history.values())
    ll = executor.program.ll
    state: dict = {}

    def key_of(key: tuple) -> tuple:
        rank, buffer, position, half = key
        return (rank, buffer, position, (half - call) % 2 if ll and buffer == "scratch" else half)

    for key, value in memory.values.items():
        state[("value", key_of(key))] = _value(value, call, levels)
    for key, history in memory.accesses.history.items():
        if history.write is not None or history.reads:
            reads = frozenset(levels.access(read) for read in history.reads.values())
            state[("accesses", key_of(key))] = (levels.access(history.write), reads)
    for block, clock in executor.clocks.clocks.items():
        state[("clock", block)] = levels.clock(clock)
    for block, clock in executor.call_start.items():
        state[("call start", block)] = levels.clock(clock)
    for end, queue in sync.signals.items():
        if queue:
            state[("signals", end)] = tuple((levels.clock(c), step, levels.clock(start)) for c, step, start in queue)
    for semaphore, queue in sync.semaphores.items():
        if queue:
            state[("tokens", semaphore)] = tuple((levels.clock(c), step) for c, step in queue)
    return state


class _ClockLevels:
    """Vector clock entries renamed: an entry for block B becomes how many of B's recorded accesses it covers."""

    def __init__(self, histories) -> None:
        counts: dict[tuple, set[int]] = defaultdict(set)
        for history in histories:
            for access in (history.write, *history.reads.values()):
                if access is not None:
                    counts[access.block].add(access.count)
        self.counts = {block: sorted(values) for block, values in counts.items()}
        self.renamed: dict[int, frozenset] = {}  # by id: the packets of one step share their writer's clock

    def clock(self, clock: Clock | None) -> frozenset | None:
        if clock is None:
            return None
        renamed = self.renamed.get(id(clock))
        if renamed is None:
            covered = ((block, bisect_right(self.counts.get(block, ()), count)) for block, count in clock.items())
            renamed = self.renamed[id(clock)] = frozenset((block, level) for block, level in covered if level)
        return renamed

    def access(self, access: Access | None) -> tuple | None:
        if access is None:
            return None
        level = bisect_left(self.counts[access.block], access.count)
        return (access.block, level, access.step, access.write, access.packet)


def _age(stamp: int, call: int) -> int:
    """0 for the current call, -1 for any earlier one (nothing compares two earlier calls)."""
    return 0 if stamp >= call else -1


def _value(value: Value, call: int, levels: _ClockLevels) -> tuple:
    contents = value.contents
    items = tuple(sorted((_age(c, call), rank, position) for c, rank, position in contents.items))
    return (
        (items, bool(contents.unknown)),  # uninitialised data taints a result whatever it was
        value.packet,
        _age(value.call, call),
        value.writer,
        value.origin,
        levels.clock(value.clock),
    )


def _first_difference(executor: Executor, before: dict, after: dict) -> str:
    """The first part of the state that differs between two consecutive calls' starts, in words."""
    for key in sorted(before.keys() | after.keys(), key=repr):
        if before.get(key) != after.get(key):
            was, now = _show(before.get(key)), _show(after.get(key))
            return f"{_name(executor, key)}: {was} at one call's start, {now} at the next"
    return "nothing"


def _name(executor: Executor, key: tuple) -> str:
    component, where = key
    if component in ("value", "accesses"):
        return (
            f"what {executor.memory.describe(where)} holds"
            if component == "value"
            else f"who last used {executor.memory.describe(where)}"
        )
    if component in ("signals", "tokens"):
        rank, number = where
        return (
            f"signals no wait took on rank {rank} ch{number}"
            if component == "signals"
            else f"tokens of rank {rank} sem{number}"
        )
    rank, block = where
    return f"{component} of rank {rank} " + (f"tb {block}" if isinstance(block, int) else str(block))


def _show(part: object) -> str:
    if part is None:
        return "none"
    if isinstance(part, tuple) and all(isinstance(entry, tuple) and len(entry) in (2, 3) for entry in part):
        return str(len(part))  # signals or tokens no wait took yet
    return "one thing"


__all__ = ["DEFAULT_LIMIT", "canonical_state", "prove_every_call"]
