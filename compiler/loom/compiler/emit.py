"""Emit a compiled program as plan JSON: metadata (compiler version, source hash, parameters),
schema check, canonical text. The same program and parameters always give the same bytes."""

from __future__ import annotations

import hashlib
import json

from loom.ir import plan_to_dict
from loom.passes.recorded_program import RecordedProgram
from loom.plan.schema import check_schema
from loom.version import __version__


def source_hash(source: str, parameters: dict) -> str:
    """sha256 over the DSL source and the parameters it was compiled with."""
    digest = hashlib.sha256()
    digest.update(source.encode())
    digest.update(b"\0")
    digest.update(json.dumps(parameters, sort_keys=True).encode())
    return "sha256:" + digest.hexdigest()


def _canonical_text(plan: dict) -> str:
    try:
        from loom.plan.canonical import canonical_plan_text
    except ImportError:  # the assembly work lands the canonical writer; until then, sorted JSON
        return json.dumps(plan, indent=2) + "\n"
    return canonical_plan_text(plan)


def emit_plan(program: RecordedProgram) -> dict:
    plan = program.compile()
    document = plan_to_dict(plan)
    parameters = dict(program.parameters)
    parameters.update(
        {
            "collective": program.collective.name,
            "world_size": plan.world_size,
            "ranks_per_node": plan.ranks_per_node,
            "protocol": plan.protocol,
            "inplace": plan.inplace,
        }
    )
    metadata = {"compiler_version": __version__, "parameters": parameters}
    source = getattr(program, "source_text", None)
    if source is not None:
        metadata["source_hash"] = source_hash(source, parameters)
    document["metadata"] = {**document.get("metadata", {}), **metadata}
    check_schema(document, program.name)
    return document


def emit_plan_text(program: RecordedProgram) -> str:
    return _canonical_text(emit_plan(program))
