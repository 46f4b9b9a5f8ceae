"""The plan JSON Schema (schemas/plan.schema.json) and checks against it with path-bearing errors."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema

from loom.errors import PlanError

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the loom package


def schema_path() -> Path:
    """The schema file: inside the installed package, or at the top of a source checkout."""
    for candidate in (
        _PACKAGE_DIR / "schemas" / "plan.schema.json",
        _PACKAGE_DIR.parents[1] / "schemas" / "plan.schema.json",
    ):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("plan.schema.json is neither in the loom package nor in a source checkout")


@functools.cache
def plan_schema() -> dict[str, Any]:
    return json.loads(schema_path().read_text(encoding="utf-8"))


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = plan_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def format_path(parts: Iterable[str | int]) -> str:
    """['gpus', 1, 'threadblocks'] -> 'gpus[1].threadblocks'; the empty path is '$'."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "$"


def _allowed_properties(schema: dict[str, Any]) -> set[str]:
    return set(schema.get("properties", {}))


def _to_plan_error(error: jsonschema.ValidationError, origin: str) -> PlanError:
    path = list(error.absolute_path)
    # Point at the field itself for missing and unknown fields, as the C++ decoder does.
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        return PlanError("missing required field", format_path([*path, missing[0]]), origin)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = _allowed_properties(error.schema)
        extra = sorted(name for name in error.instance if name not in allowed)
        if extra:
            detail = f"unknown field (allowed here: {', '.join(sorted(allowed))})"
            return PlanError(detail, format_path([*path, extra[0]]), origin)
    if error.validator == "uniqueItems" and isinstance(error.instance, list):
        # Point at the repeated item, as the C++ decoder does, not at the whole list.
        seen: list[str] = []
        for index, item in enumerate(error.instance):
            text = json.dumps(item, sort_keys=True)
            if text in seen:
                return PlanError(f"{text} is listed twice", format_path([*path, index]), origin)
            seen.append(text)
    return PlanError(error.message, format_path(path), origin)


def schema_errors(document: Any, origin: str = "") -> list[PlanError]:
    """Every schema violation in the document, shallowest first."""
    errors = sorted(
        _validator().iter_errors(document), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)))
    )
    return [_to_plan_error(error, origin) for error in errors]


@functools.cache
def _op_validator(name: str) -> jsonschema.protocols.Validator:
    """A validator for one op kind: what the schema's if/then chain selects for ops named `name`."""
    schema = plan_schema()
    op_schema = _inline_refs(schema["$defs"]["ops"][_OP_SCHEMA.get(name, name)], schema)
    return jsonschema.validators.validator_for(schema)({"$defs": schema["$defs"], **op_schema})


def _inline_refs(node: Any, root: dict[str, Any]) -> Any:
    """node with its local $refs replaced by their targets (resolving a $ref per value is most of
    jsonschema's time); the recursive reference to a whole op (pipeline bodies) stays a $ref."""
    if isinstance(node, list):
        return [_inline_refs(item, root) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/") and ref != "#/$defs/op":
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        rest = {key: value for key, value in node.items() if key != "$ref"}
        resolved = _inline_refs(target, root)
        return {"allOf": [resolved, _inline_refs(rest, root)]} if rest else resolved
    return {key: _inline_refs(value, root) for key, value in node.items()}


# Ops that share another op's schema (see $defs/op in plan.schema.json).
_OP_SCHEMA = {
    "sem_acquire": "semaphore",
    "sem_release": "semaphore",
    "put_with_signal": "put",
    "put_with_signal_and_flush": "put",
}
_PLACEHOLDER_BODY = [{"op": "nop"}]


def _ops_valid(ops: Any, in_pipeline: bool = False) -> bool:
    known = set(plan_schema()["$defs"]["op_name"]["enum"])
    for op in ops:
        name = op.get("op") if isinstance(op, dict) else None
        if name not in known or (in_pipeline and name == "pipeline"):
            return False
        if name == "pipeline":
            body = op.get("body")
            if not isinstance(body, list) or not body or not _ops_valid(body, True):
                return False
            op = {**op, "body": _PLACEHOLDER_BODY}
        if not _op_validator(name).is_valid(op):
            return False
    return True


def _valid_by_parts(document: Any) -> bool:
    """The schema check of a whole plan, done per part: the plan with its op lists emptied, then each
    op against its own op schema. The schema has no rule that spans ops, so this accepts exactly what
    the whole-document check accepts, while skipping the 27-way if/then chain per op (4x faster).
    Anything not shaped like a plan down to the op lists is left to the whole-document check."""

    def is_list_of_objects(value: Any) -> bool:
        return isinstance(value, list) and all(isinstance(item, dict) for item in value)

    if not isinstance(document, dict) or not is_list_of_objects(document.get("gpus")):
        return False
    if not all(is_list_of_objects(gpu.get("threadblocks")) for gpu in document["gpus"]):
        return False
    blocks = [tb for gpu in document["gpus"] for tb in gpu["threadblocks"]]
    if not all(isinstance(tb.get("ops"), list) for tb in blocks):
        return False
    skeleton = {
        **document,
        "gpus": [
            {**gpu, "threadblocks": [{**tb, "ops": []} for tb in gpu["threadblocks"]]} for gpu in document["gpus"]
        ],
    }
    ops = [tb["ops"] for tb in blocks]
    return _validator().is_valid(skeleton) and all(_ops_valid(o) for o in ops)


def check_schema(document: Any, origin: str = "") -> None:
    """Raise PlanError for the most relevant schema violation, if any."""
    if _valid_by_parts(document):
        return
    best = jsonschema.exceptions.best_match(_validator().iter_errors(document))
    if best is not None:
        raise _to_plan_error(best, origin)
