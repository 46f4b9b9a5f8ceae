"""What Loom served in a job run under ``libloom_nccl.so``: the ``LOOM_NCCL_STATS`` JSON files that the
library writes (one per process), summed over every rank. ``loom nccl-coverage FILE...`` prints it.

A row counts one (collective, route, reason): the calls and bytes (this rank's send buffer) that a Loom
plan ran, that were forwarded to NCCL and why, or that needed nothing or a local copy. The Loom-plan share
counts the calls that move data between ranks (a plan or NCCL ran them), as the library's log does.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from loom.errors import LoomError

FORMAT = "loom-nccl-coverage"
BETWEEN_RANKS = ("loom", "nccl", "error")
_SCHEMA = "nccl_coverage.schema.json"
_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the loom package


def schema_path() -> Path:
    """schemas/nccl_coverage.schema.json: inside the installed package, or at the top of a source checkout."""
    for candidate in (_PACKAGE_DIR / "schemas" / _SCHEMA, _PACKAGE_DIR.parents[1] / "schemas" / _SCHEMA):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{_SCHEMA} is neither in the loom package nor in a source checkout")


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(schema_path().read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def check_report(document: Any, origin: str) -> None:
    """A LoomError naming the file and the JSON path of the first field the schema rejects."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise LoomError(f"{origin}: not a coverage report of libloom_nccl.so (format: expected '{FORMAT}')")
    error = jsonschema.exceptions.best_match(_validator().iter_errors(document))
    if error is not None:
        path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)
        raise LoomError(f"{origin}: ${path}: {error.message}")


@dataclass
class Coverage:
    processes: int = 0
    communicators: int = 0
    launches: int = 0  # kernels Loom launched for its calls
    rows: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)  # (call, route, reason) -> [calls, bytes]

    def add(self, call: str, route: str, reason: str, calls: int, nbytes: int) -> None:
        totals = self.rows.setdefault((call, route, reason), [0, 0])
        totals[0] += calls
        totals[1] += nbytes

    def total(self, routes: Iterable[str]) -> tuple[int, int]:
        wanted = set(routes)
        rows = [value for (_, route, _), value in self.rows.items() if route in wanted]
        return sum(calls for calls, _ in rows), sum(nbytes for _, nbytes in rows)

    def loom_share(self) -> tuple[float, float]:
        """The shares of calls and of bytes between ranks that Loom plans ran (1.0 when there were none)."""
        loom_calls, loom_bytes = self.total(["loom"])
        calls, nbytes = self.total(BETWEEN_RANKS)
        return (loom_calls / calls if calls else 1.0, loom_bytes / nbytes if nbytes else 1.0)


def read_coverage(paths: Iterable[str | Path]) -> Coverage:
    """Sums the files (every communicator of every process); a file that is not such a report, or one that
    schemas/nccl_coverage.schema.json rejects, is a LoomError naming the file (and the field)."""
    coverage = Coverage()
    for path in paths:
        try:
            document = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise LoomError(f"{path}: not a readable coverage report: {error}") from error
        check_report(document, str(path))
        coverage.processes += 1
        for communicator in document["communicators"]:
            coverage.communicators += 1
            coverage.launches += communicator.get("launches", 0)
            for row in communicator["rows"]:
                coverage.add(row["call"], row["route"], row["reason"], row["calls"], row["bytes"])
    return coverage


def _counted(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def format_coverage(coverage: Coverage) -> str:
    calls_share, bytes_share = coverage.loom_share()
    loom_calls, loom_bytes = coverage.total(["loom"])
    calls, nbytes = coverage.total(BETWEEN_RANKS)
    lines = [
        f"{_counted(coverage.processes, 'process', 'processes')},"
        f" {_counted(coverage.communicators, 'communicator', 'communicators')}:"
        f" Loom plans ran {loom_calls} of {calls} calls between ranks"
        f" ({100 * calls_share:.1f}%) and {loom_bytes} of {nbytes} bytes ({100 * bytes_share:.1f}%),"
        f" in {_counted(coverage.launches, 'launch', 'launches')}",
        f"{'call':<14} {'route':<11} {'reason':<26} {'calls':>10} {'bytes':>16}",
    ]
    for (call, route, reason), (row_calls, row_bytes) in sorted(coverage.rows.items()):
        lines.append(f"{call:<14} {route:<11} {reason:<26} {row_calls:>10} {row_bytes:>16}")
    return "\n".join(lines)


__all__ = ["Coverage", "check_report", "format_coverage", "read_coverage", "schema_path"]
