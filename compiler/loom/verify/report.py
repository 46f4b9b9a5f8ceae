"""Findings: what the verifier reports, where in the plan, and how it reads as text.

A finding names the op it is about (rank, thread block, op index, the op in plan assembly, the
DSL line) and says what went wrong in terms of chunks: what a chunk holds and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from loom.errors import LoomError

# In report order: causes first (a reference outside the plan, a hang, misused packets, a race),
# then what they lead to (wrong results), then a plan whose later calls the run does not vouch for.
CATEGORIES = ("bounds", "deadlock", "packet", "race", "postcondition", "calls")


@dataclass(frozen=True)
class Finding:
    """One problem. ``op_index`` is the op's position in its thread block's ``ops``;
    ``body_index`` its position inside that pipeline's ``body``, when it is in one. ``tb`` and
    ``op_index`` are None for a finding about a rank as a whole (an output chunk nothing wrote)."""

    category: str
    rank: int
    tb: int | None
    op_index: int | None
    message: str
    op_text: str = ""  # the op as one line of plan assembly, without its source location
    loc: str | None = None  # "file:line" of the DSL line that recorded the op
    body_index: int | None = None
    call: int | None = None  # the call (0, 1, ...) it showed up in, for run-time findings

    @property
    def where(self) -> str:
        """``rank 1 tb 0 op 4`` (``op 4.2`` for op 2 of the body of pipeline op 4)."""
        text = f"rank {self.rank}"
        if self.tb is not None:
            text += f" tb {self.tb}"
        if self.op_index is not None:
            text += f" op {self.op_index}" + (f".{self.body_index}" if self.body_index is not None else "")
        return text

    def __str__(self) -> str:
        text = f"{self.where}: {self.category}: {self.message}"
        if self.op_text:
            text += f"\n    {self.op_text}" + (f"  @ {self.loc}" if self.loc else "")
        return text

    def sort_key(self) -> tuple:
        def number(value: int | None) -> int:
            return -1 if value is None else value

        return (
            CATEGORIES.index(self.category),
            self.rank,
            number(self.tb),
            number(self.op_index),
            number(self.body_index),
            self.message,
        )


def op_text(op: dict) -> str:
    """``op`` as one line of plan assembly (as ``loom disasm`` writes it), without its ``loc``."""
    # The assembly package (and lark with it) loads only when there is something to report.
    from loom.assembly.disasm import format_op
    from loom.errors import PlanError
    from loom.plan.canonical import compact_json

    bare = {key: value for key, value in op.items() if key != "loc"}
    try:
        return format_op(bare)
    except (PlanError, KeyError, TypeError, ValueError):
        return compact_json(bare)  # an op plan assembly cannot write: show its JSON


def loc_text(op: dict) -> str | None:
    loc = op.get("loc")
    if isinstance(loc, dict) and "file" in loc and "line" in loc:
        return f"{loc['file']}:{loc['line']}"
    return None


class OpSite(Protocol):
    """Where an op runs, as a finding names it (the verifier's ``program.Step`` is one)."""

    rank: int
    tb: int
    index: int
    body: int | None

    def text(self) -> str: ...

    def loc(self) -> str | None: ...


def finding_at(step: OpSite, category: str, message: str, call: int | None = None) -> Finding:
    """A finding about ``step``'s op."""
    return Finding(
        category,
        step.rank,
        step.tb,
        step.index,
        message,
        step.text(),
        step.loc(),
        step.body,
        call,
    )


@dataclass
class FindingLog:
    """Findings as they are found, one per key: the first of each kind wins, so a wrong op is
    reported once however many sub-chunks, pipeline iterations or calls it is wrong in."""

    seen: set = field(default_factory=set)
    items: list[Finding] = field(default_factory=list)

    def add(self, finding: Finding, kind: str = "", key: tuple | None = None) -> None:
        """Keep ``finding`` unless one with the same key came first: by default its category, op
        and ``kind`` (a word for what went wrong, so that one op can have two different problems)."""
        if key is None:
            key = (finding.category, finding.rank, finding.tb, finding.op_index, finding.body_index, kind)
        if key not in self.seen:
            self.seen.add(key)
            self.items.append(finding)

    def sorted(self) -> list[Finding]:
        return sorted(self.items, key=Finding.sort_key)


def format_findings(findings: list[Finding], limit: int | None = None) -> str:
    """The findings as text, one block each. With ``limit``, at most that many per category and
    rank, and a line saying how many more there are."""
    lines: list[str] = []
    shown: dict[tuple[str, int], int] = {}
    hidden: dict[tuple[str, int], int] = {}
    for finding in findings:
        key = (finding.category, finding.rank)
        if limit is not None and shown.get(key, 0) >= limit:
            hidden[key] = hidden.get(key, 0) + 1
            continue
        shown[key] = shown.get(key, 0) + 1
        lines.append(str(finding))
    for (category, rank), count in sorted(hidden.items(), key=lambda item: (CATEGORIES.index(item[0][0]), item[0][1])):
        lines.append(f"... and {count} more {category} finding(s) on rank {rank}")
    return "\n".join(lines)


def summary(findings: list[Finding]) -> str:
    """``3 findings: 1 deadlock, 2 race``."""
    counts = {category: sum(f.category == category for f in findings) for category in CATEGORIES}
    parts = ", ".join(f"{count} {category}" for category, count in counts.items() if count)
    return f"{len(findings)} finding{'s' if len(findings) != 1 else ''}" + (f": {parts}" if parts else "")


class VerificationError(LoomError):
    """A plan the verifier found wrong; ``findings`` lists why."""

    def __init__(self, name: str, findings: list[Finding], limit: int | None = 5) -> None:
        self.name = name
        self.findings = findings
        super().__init__(f"plan {name} fails verification, {summary(findings)}\n{format_findings(findings, limit)}")
