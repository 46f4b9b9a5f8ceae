"""Happens-before with vector clocks, and the access log that finds races with it.

Every thread block (and, per rank, the user between calls: the ``host`` block) has a vector
clock: for every block, how many of its steps it has heard of. A step ticks its own entry; a
synchronisation hands clocks over: ``signal`` -> ``wait``, ``sem_release`` -> ``sem_acquire``,
the arrivals of a barrier to every block leaving it, a packet's writer to its poller, and a
rank's thread blocks to the user at the end of a call and back at the start of the next.

Two accesses to one location, at least one a write, race unless the earlier one happens before
the later one: the later block has heard of the earlier step. Because the verdict depends only
on the clocks, it does not depend on the interleaving the executor happened to choose.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loom.verify.program import Step

Block = tuple  # (rank, tb) or (rank, "host")
Clock = dict  # Block -> steps of that block heard of


def merge(into: Clock, other: Clock) -> None:
    for block, count in other.items():
        if into.get(block, 0) < count:
            into[block] = count


class HappensBefore:
    """The vector clock of every block."""

    def __init__(self) -> None:
        self.clocks: dict[Block, Clock] = {}

    def clock(self, block: Block) -> Clock:
        return self.clocks.setdefault(block, {})

    def tick(self, block: Block) -> Clock:
        clock = self.clock(block)
        clock[block] = clock.get(block, 0) + 1
        return clock

    def learn(self, block: Block, other: Clock) -> None:
        merge(self.clock(block), other)

    def snapshot(self, block: Block) -> Clock:
        return dict(self.clock(block))

    def reset(self, block: Block, clock: Clock) -> None:
        self.clocks[block] = dict(clock)


@dataclass(frozen=True, slots=True)
class Access:
    block: Block
    count: int  # the block's own clock entry at the access
    step: Step | None  # None: the user, between calls
    write: bool
    packet: bool


@dataclass(slots=True)
class History:
    """The last write of a location and the reads since."""

    write: Access | None = None
    reads: dict[Block, Access] = field(default_factory=dict)


class AccessLog:
    """Records accesses; ``access`` returns the earlier access a new one races with, if any."""

    def __init__(self, clocks: HappensBefore) -> None:
        self.clocks = clocks
        self.history: dict[tuple, History] = defaultdict(History)

    def access(self, block: Block, step: Step | None, key: tuple, write: bool, packet: bool) -> Access | None:
        clock = self.clocks.clock(block)
        entry = self.history[key]
        race = None
        earlier = entry.write
        if earlier is not None and earlier.block != block and clock.get(earlier.block, 0) < earlier.count:
            race = earlier
        if write and race is None:
            for read in entry.reads.values():
                if read.block != block and clock.get(read.block, 0) < read.count:
                    race = read
                    break
        me = Access(block, clock.get(block, 0), step, write, packet)
        if write:
            entry.write = me
            entry.reads = {}
        else:
            entry.reads[block] = me
        return race
