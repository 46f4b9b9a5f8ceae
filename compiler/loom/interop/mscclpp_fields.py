"""Typed reads of MSCCL++ plan JSON: every failure is an InvalidArgumentError naming the JSON path."""

from __future__ import annotations

from typing import Any

from loom.errors import InvalidArgumentError

_MISSING = object()


def fail(path: str, detail: str) -> InvalidArgumentError:
    """The error for the value at ``path`` (``gpus[0].threadblocks[1].ops[3].name``)."""
    return InvalidArgumentError(f"{path}: {detail}")


def shown(value: Any) -> str:
    """A value as the message quotes it: JSON-like, and short."""
    if isinstance(value, str):
        text = '"' + value + '"'
    elif value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def obj(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise fail(path, f"expected a JSON object, got {shown(value)}")
    return value


def only_keys(data: dict, allowed: frozenset[str], path: str) -> None:
    """MSCCL++'s reader ignores fields it does not know; the importer refuses them, so that nothing in
    the source plan is dropped without a word."""
    for key in sorted(data):
        if key not in allowed:
            raise fail(
                f"{path}.{key}", f"unknown field (MSCCL++ fields Loom imports here: {', '.join(sorted(allowed))})"
            )


def get(data: dict, key: str, path: str, default: Any = _MISSING) -> Any:
    if key in data:
        return data[key]
    if default is _MISSING:
        raise fail(f"{path}.{key}", "missing required field")
    return default


def integer(value: Any, path: str, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(path, f"expected an integer, got {shown(value)}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise fail(path, f"{value} is out of range (expected {bound})")
    return value


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise fail(path, f"expected true or false, got {shown(value)}")
    return value


def string(value: Any, path: str, choices: dict[str, Any] | None = None) -> str:
    if not isinstance(value, str):
        raise fail(path, f"expected a string, got {shown(value)}")
    if choices is not None and value not in choices:
        raise fail(path, f"{shown(value)} is not one of {', '.join(shown(c) for c in choices)}")
    return value


def array(value: Any, path: str, nonempty: bool = False) -> list:
    if not isinstance(value, list):
        raise fail(path, f"expected a JSON array, got {shown(value)}")
    if nonempty and not value:
        raise fail(path, "expected a non-empty array")
    return value
