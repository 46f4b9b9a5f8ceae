"""JSON(): compile the active program and return its plan as text."""

from __future__ import annotations

from loom.language.program import get_program


def JSON() -> str:  # noqa: N802 - the MSCCL++ name
    """The active program compiled into plan JSON (canonical, schema-checked)."""
    return get_program().to_json()


__all__ = ["JSON"]
