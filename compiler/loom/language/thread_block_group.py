"""Thread-block groups, and where an op runs (``tb=`` or ``tb_group=``)."""

from __future__ import annotations

from loom.errors import DSLError
from loom.language.program import caller_location


class ThreadBlockGroup:
    """Thread blocks that share an op: each runs its own equal part of the op's chunks.

    The compiler cuts every chunk finely enough that each member's part is a whole number of
    chunks, so a group of 4 on a 1-chunk copy becomes 4 quarter-size copies.
    """

    def __init__(self, tb_list: list[int]) -> None:
        tb_list = list(tb_list)
        if not tb_list:
            raise DSLError("a ThreadBlockGroup needs at least one thread block", caller_location())
        seen: set[int] = set()
        for position, tb in enumerate(tb_list):
            _check_tb(tb)
            if tb in seen:
                raise DSLError(
                    f"thread block {tb} appears twice in the group (at position {position})", caller_location()
                )
            seen.add(tb)
        self.tb_list = tb_list
        self._index = {tb: i for i, tb in enumerate(tb_list)}

    def get_internal_id(self, tb: int) -> int:
        if tb not in self._index:
            raise DSLError(f"thread block {tb} is not in this group {self.tb_list}", caller_location())
        return self._index[tb]

    def numtb(self) -> int:
        return len(self.tb_list)


def _check_tb(tb: object) -> int:
    if not isinstance(tb, int) or isinstance(tb, bool) or tb < 0:
        raise DSLError(f"a thread block id is a non-negative integer, got {tb!r}", caller_location())
    return tb


def placements(tb: int | None, tb_group: ThreadBlockGroup | None) -> list[tuple[int, tuple[int, int] | None]]:
    """(thread block, (member index, group size) or None) for every thread block that runs the op."""
    if tb is not None and tb_group is not None:
        raise DSLError(
            f"conflicting placement: give tb= or tb_group=, not both (tb={tb}, tb_group={tb_group.tb_list})",
            caller_location(),
        )
    if tb_group is not None:
        if not isinstance(tb_group, ThreadBlockGroup):
            raise DSLError(f"tb_group must be a ThreadBlockGroup, got {tb_group!r}", caller_location())
        size = tb_group.numtb()
        return [(member, (i, size) if size > 1 else None) for i, member in enumerate(tb_group.tb_list)]
    if tb is None:
        raise DSLError(
            "the op needs a placement: tb= (a thread block id) or tb_group= (a ThreadBlockGroup)", caller_location()
        )
    return [(_check_tb(tb), None)]


__all__ = ["ThreadBlockGroup"]
