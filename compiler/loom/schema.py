"""The plan JSON Schema (schemas/plan.schema.json) and checks against it with path-bearing errors."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema

from loom.errors import PlanError

_PACKAGE_DIR = Path(__file__).resolve().parent


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


def check_schema(document: Any, origin: str = "") -> None:
    """Raise PlanError for the most relevant schema violation, if any."""
    best = jsonschema.exceptions.best_match(_validator().iter_errors(document))
    if best is not None:
        raise _to_plan_error(best, origin)
