"""The plan verifier: runs a plan on symbolic chunks and proves it computes its collective.

``verify(plan)`` executes every thread block of every rank concurrently for ``calls`` consecutive
calls, each chunk holding the multiset of (rank, input chunk) contributions it has received, and
returns a list of ``Finding``s (empty when the plan is correct): the collective's postcondition
on every output chunk of every rank, races between thread blocks and ranks (vector clocks over
signal/wait, barriers, semaphores and packets), deadlocks, out-of-range references and packet
misuse. docs/verify.md describes the model, what it proves and what it does not.

The module itself is callable: ``loom.verify(plan)`` is ``loom.verify.verify(plan)``.
"""

from __future__ import annotations

import os
import sys
import types
from fractions import Fraction

from loom.errors import InvalidArgumentError
from loom.ir.model import SAMPLED_UNIT_CHUNKS
from loom.verify.induction import prove_every_call
from loom.verify.program import Program, has_unit_pipelines
from loom.verify.report import CATEGORIES, Finding, FindingLog, VerificationError, format_findings, summary
from loom.verify.schedule import Executor

# Three calls: the fewest that show an ``ll`` plan reusing its double-buffered scratch too early.
# The CLI and ``loom compile`` run the same number.
DEFAULT_CALLS = 3


def verify(plan: dict | str | os.PathLike[str], *, calls: int = DEFAULT_CALLS) -> list[Finding]:
    """The findings of running ``plan`` (a plan dict that passes the schema, or the path of a plan
    file, see ``load_plan``) for ``calls`` consecutive calls, in a fixed order: by category
    (``CATEGORIES``), rank, thread block, op. Each wrong op is reported once, at the first call it
    is wrong in; each wrong output chunk once. A deadlock ends the run, so the calls it keeps from
    finishing are not checked."""
    if isinstance(plan, (str, os.PathLike)):
        plan = load_plan(plan)
    elif not isinstance(plan, dict):
        raise InvalidArgumentError(f"plan must be a plan dict or the path of a plan file, got {type(plan).__name__}")
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
        raise InvalidArgumentError(f"calls must be a positive integer, got {calls!r}")
    log = FindingLog()
    for unit_chunks in SAMPLED_UNIT_CHUNKS if has_unit_pipelines(plan) else (Fraction(1),):
        program = Program(plan, log, unit_chunks)
        Executor(program, calls, log).run()
        prove_every_call(program, log)  # and every call after those: the inductive step
    return log.sorted()


def check(plan: dict | str | os.PathLike[str], *, calls: int = DEFAULT_CALLS) -> None:
    """``verify``, raising ``VerificationError`` (a ``LoomError``) that lists the findings."""
    if isinstance(plan, (str, os.PathLike)):
        plan = load_plan(plan)
    findings = verify(plan, calls=calls)
    if findings:
        raise VerificationError(str(plan.get("name", "<plan>")), findings)


def load_plan(path: str | os.PathLike[str]) -> dict:
    """A plan file, JSON or (``.txt``) plan assembly, checked against the schema."""
    if os.fspath(path).endswith(".txt"):
        from loom.assembly import assemble_file

        return assemble_file(path, check=True)
    from loom.plan.schema import check_schema
    from loom.plan.validate import read_plan_json

    plan = read_plan_json(path)
    check_schema(plan, str(path))
    return plan


def verify_file(path: str | os.PathLike[str], *, calls: int = DEFAULT_CALLS) -> list[Finding]:
    """``verify`` of the plan in ``path`` (see ``load_plan``); a file that does not load or fails
    the schema raises ``PlanError``."""
    return verify(load_plan(path), calls=calls)


class _CallableModule(types.ModuleType):
    def __call__(self, plan: dict | str | os.PathLike[str], *, calls: int = DEFAULT_CALLS) -> list[Finding]:
        return verify(plan, calls=calls)


sys.modules[__name__].__class__ = _CallableModule

__all__ = [
    "CATEGORIES",
    "DEFAULT_CALLS",
    "Finding",
    "VerificationError",
    "check",
    "format_findings",
    "load_plan",
    "summary",
    "verify",
    "verify_file",
]
