"""Validate plan files: size limit, UTF-8, JSON syntax, the schema, then the native decoder's
semantic checks (chunk bounds, channels, ids, world size)."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

from loom.errors import InvalidArgumentError, PlanError
from loom.native import native_module
from loom.plan.schema import check_schema

_BOM_DETAIL = "invalid JSON: the file starts with a byte order mark (U+FEFF); JSON text must not"
_GZIP_MAGIC = b"\x1f\x8b"  # never the start of JSON text: 0x1f is not JSON whitespace
DEFAULT_MAX_PLAN_BYTES = 32 << 20  # the native decoder's limit; keep in step with plan.hpp


def max_plan_bytes() -> int:
    text = os.environ.get("LOOM_MAX_PLAN_BYTES", "")
    if not text:
        return DEFAULT_MAX_PLAN_BYTES
    # ASCII digits only, in 1 .. 2**64 - 1, as the native reader takes them: str.isdigit() alone
    # would let through "²" (which int() then refuses) and other scripts' digits.
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 2**64:
        raise InvalidArgumentError(f"LOOM_MAX_PLAN_BYTES: expected a positive number of bytes, got {text!r}")
    return int(text)


def _gunzip(raw: bytes, limit: int, origin: str) -> bytes:
    """The data of a gzip file (every member), as the native loader reads it (executor/src/gzip.cc)."""
    out = bytearray()
    while raw:
        stream = zlib.decompressobj(wbits=31)
        try:
            out += stream.decompress(raw, limit + 1 - len(out))
        except zlib.error as error:
            raise PlanError(f"invalid gzip data: {error}", "$", origin) from None
        if len(out) > limit:
            raise PlanError(
                f"the plan is over the limit of {limit} bytes once decompressed (LOOM_MAX_PLAN_BYTES raises it)",
                "$",
                origin,
            )
        if not stream.eof:
            raise PlanError("invalid gzip data: the file ends inside the compressed stream (truncated?)", "$", origin)
        raw = stream.unused_data
    return bytes(out)


def read_plan_json(path: str | os.PathLike[str]) -> Any:
    """Read a plan file into Python objects, raising PlanError for size, encoding and syntax.

    The file holds plan JSON, or gzip-compressed plan JSON (how the bundled plans are installed,
    ``NAME.json.gz``); the size limit applies to the JSON."""
    origin = str(path)
    try:
        size = Path(path).stat().st_size
    except OSError as error:
        # Same words as the native loader, so both paths report a missing file alike.
        raise InvalidArgumentError(f"cannot open plan file '{path}': {error.strerror}") from None
    limit = max_plan_bytes()
    if size > limit:
        raise PlanError(
            f"the plan is {size} bytes, over the limit of {limit} bytes (LOOM_MAX_PLAN_BYTES raises it)", "$", origin
        )
    raw = Path(path).read_bytes()
    if raw.startswith(_GZIP_MAGIC):
        raw = _gunzip(raw, limit, origin)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PlanError(f"invalid JSON: not UTF-8 at byte {error.start}", "$", origin) from None
    if text.startswith("\ufeff"):
        raise PlanError(_BOM_DETAIL, "$", origin)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        message = error.msg.removesuffix(" at")  # "Unterminated string starting at" already ends in "at"
        raise PlanError(f"invalid JSON: {message} at line {error.lineno} column {error.colno}", "$", origin) from None
    except RecursionError:
        raise PlanError("invalid JSON: nested too deeply", "$", origin) from None


def validate_plan_file(path: str | os.PathLike[str]) -> Any:
    """Check one plan file completely; return the decoded native Plan or raise PlanError."""
    document = read_plan_json(path)
    check_schema(document, str(path))
    return native_module().Plan.load(str(path))
