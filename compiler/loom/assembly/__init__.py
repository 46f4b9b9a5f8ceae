"""Plan assembly: a readable text form of plan JSON (format v1), one op per line.

``disassemble(plan)`` writes it, ``assemble(text)`` reads it back; the grammar is
``grammar.lark`` beside this file. ``assemble(disassemble(plan))`` is ``normalise_plan(plan)``, so
``canonical_plan_text`` of both is the same bytes. docs/plan-format.md, "Plan assembly", describes
the syntax.
"""

from loom.assembly.asm import AssemblyError, assemble, assemble_file
from loom.assembly.disasm import disassemble, format_chunk

__all__ = ["AssemblyError", "assemble", "assemble_file", "disassemble", "format_chunk"]
