"""What the passes and the emitter read of a recorded DSL program: a Protocol, so that the compiler
depends on the program's shape and not on the DSL that records it (which calls the compiler from
``CollectiveProgram.compile`` and ``to_json``)."""

from __future__ import annotations

from typing import Any, Protocol

from loom.ir import model as ir
from loom.language.collectives import Collective


class RecordedProgram(Protocol):
    """A program as recorded (``loom.language.program.CollectiveProgram`` is one)."""

    name: str
    plan: ir.Plan  # the ops as recorded, before the passes
    collective: Collective
    auto_sync: bool
    instances: int
    instr_fusion: bool
    parameters: dict[str, Any]  # what it was built with, for the plan's metadata

    def compile(self) -> ir.Plan: ...
