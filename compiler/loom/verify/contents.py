"""What a chunk holds, symbolically: a multiset of contributions.

A contribution is ``(call, rank, position)``: sub-chunk ``position`` of ``rank``'s input as the
user wrote it for call ``call``. A reduction adds the multisets of its sources, a copy, put or
packet moves one unchanged. Adding is exact: a contribution reduced twice is there twice, so the
postcondition sees it. Data read from a location nothing wrote is *uninitialised*; it taints every
result it flows into and is carried as the description of where it was read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loom.verify.program import Step

Contribution = tuple[int, int, int]  # (call, rank, input sub-chunk)
# The position of a mailbox's content (alltoallv): (call, rank, MAILBOX_ENTRY) is rank's receive entry of that call.
MAILBOX_ENTRY = -1


class Contents:
    """An immutable multiset of contributions (``items``, sorted) and uninitialised sources."""

    __slots__ = ("items", "unknown")

    def __init__(self, items: tuple[Contribution, ...] = (), unknown: tuple[str, ...] = ()) -> None:
        self.items = items
        self.unknown = unknown

    @classmethod
    def input(cls, call: int, rank: int, position: int) -> Contents:
        return cls(((call, rank, position),))

    @classmethod
    def uninitialised(cls, where: str) -> Contents:
        return cls((), (where,))

    def __add__(self, other: Contents) -> Contents:
        unknown = self.unknown + tuple(u for u in other.unknown if u not in self.unknown)
        return Contents(tuple(sorted(self.items + other.items)), unknown)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Contents) and self.items == other.items and self.unknown == other.unknown

    def __hash__(self) -> int:
        return hash((self.items, self.unknown))

    def __repr__(self) -> str:
        return f"Contents({self.items!r}, {self.unknown!r})"


@dataclass(slots=True)
class Value:
    """What one sub-chunk of memory holds: contents, plain or packed, and who put it there."""

    contents: Contents
    packet: bool
    call: int  # the call that wrote it; for packets, the flag a reader of that call polls for
    writer: Step | None  # the op that wrote it last; None: the user, between calls
    origin: Step | None  # the op that computed the contents (a reduction); None: straight from an input
    clock: dict | None = None  # packets: the writer's vector clock, which a poller learns


def show_contribution(item: Contribution, factor: int, call: int, whole_chunk: bool) -> str:
    """``r2:input[5]``; ``r2:input[5](1/4)`` for sub-chunk 1 of 4; ``...@call0`` from another call."""
    item_call, rank, position = item
    index, part = divmod(position, factor)
    text = f"r{rank}:input[{index}]"
    if factor > 1 and not whole_chunk:
        text += f"({part}/{factor})"
    if item_call != call:
        text += f"@call{item_call}"
    return text


def show_multiset(items: list[tuple[str, int]], limit: int = 10) -> str:
    """``{a, b, b x2}`` from (text, multiplicity) pairs in order."""
    words = [text if times == 1 else f"{text} x{times}" for text, times in items]
    if len(words) > limit:
        words = words[:limit] + [f"... ({len(words)} in all)"]
    return "{" + ", ".join(words) + "}"


def whole_chunks(parts: list[Contents], factor: int) -> Counter | None:
    """When sub-chunk ``s`` of every part holds sub-chunk ``s`` of the same input chunks, the
    multiset of those chunks as ``(call, rank, index * factor)`` (shown as whole chunks); else None."""
    first: Counter | None = None
    for part, contents in enumerate(parts):
        if contents.unknown or any(position % factor != part for _, _, position in contents.items):
            return None
        chunks = Counter((c, r, position - part) for c, r, position in contents.items)
        if first is None:
            first = chunks
        elif chunks != first:
            return None
    return first
