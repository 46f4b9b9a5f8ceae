"""Golden tests of the passes: ``golden/<pass>/<case>.in.txt`` is plan assembly, the pass
``loom.passes.<pass>`` runs on it alone, and the result must read exactly as ``<case>.out.txt``.
Both sides must be schema-valid plans. Case names say what they show: ``keeps_*`` cases must come
out unchanged, every other case must change the plan.

Two passes need more than the plan: ``dependencies`` orders ops of different thread blocks by the
DSL line that recorded them (the runner takes each op's ``@ file:LINE`` as its trace position), and
``instances`` takes the instance count from the case name (``x2_...`` runs two instances).

``LOOM_UPDATE_GOLDEN=1 pytest tests/compiler/passes`` rewrites the .out.txt files from what the
passes produce now; review the diff before committing it.

Plan assembly has no word for the IR-only ``auto`` flag, so the files mark a nop the dependency pass
would have inserted with a trailing comment, ``nop  # auto``; the runner sets ``auto`` on those nops
before the pass and writes the same comment after the auto nops that are left.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from loom.assembly import assemble, disassemble
from loom.ir import model as ir
from loom.ir import plan_from_dict, plan_to_dict
from loom.plan.schema import check_schema

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("LOOM_UPDATE_GOLDEN", "") in ("1", "true", "yes", "on")
_NOP_LINE = re.compile(r"^\s*nop\b")
_AUTO_MARK = "  # auto"

CASES = sorted(GOLDEN.glob("*/*.in.txt"))


def _nops(plan: ir.Plan) -> Iterator[ir.Op]:
    """The plan's nops in the order disassemble writes them."""

    def walk(ops: list[ir.Op]) -> Iterator[ir.Op]:
        for op in ops:
            if op.op == "nop":
                yield op
            yield from walk(op.body)

    for gpu in sorted(plan.gpus, key=lambda g: g.id):
        for tb in gpu.threadblocks:
            yield from walk(tb.ops)


def read_plan(text: str, origin: str) -> ir.Plan:
    plan = plan_from_dict(assemble(text, origin, check=True))
    marks = [line.rstrip().endswith("# auto") for line in text.splitlines() if _NOP_LINE.match(line)]
    nops = list(_nops(plan))
    assert len(marks) == len(nops), f"{origin}: a nop line the runner did not recognise"
    for op, auto in zip(nops, marks, strict=True):
        op.auto = auto
    return plan


def write_plan(plan: ir.Plan) -> str:
    marks = iter([op.auto for op in _nops(plan)])
    document = plan_to_dict(plan)
    check_schema(document, "the pass's output")
    lines = disassemble(document).splitlines()
    return "".join(line + (_AUTO_MARK if _NOP_LINE.match(line) and next(marks) else "") + "\n" for line in lines)


def run_pass(case: Path, plan: ir.Plan) -> ir.Plan:
    module = importlib.import_module(f"loom.passes.{case.parent.name}")
    if case.parent.name == "instances":
        return module.run(plan, int(re.search(r"x(\d+)_", case.name).group(1)))
    if case.parent.name == "dependencies":
        for gpu in plan.gpus:
            for tb in gpu.threadblocks:
                for op in tb.ops:
                    op.seq = op.loc.line
    return module.run(plan)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name[: -len('.in.txt')]}" for c in CASES])
def test_golden(case: Path) -> None:
    text = case.read_text(encoding="utf-8")
    result = write_plan(run_pass(case, read_plan(text, str(case))))
    unchanged = write_plan(read_plan(text, str(case)))
    assert (result == unchanged) == case.name.startswith("keeps_"), "keeps_* cases come out unchanged, others change"
    expected = case.with_name(case.name.replace(".in.txt", ".out.txt"))
    if UPDATE:
        expected.write_text(result, encoding="utf-8")
    assert expected.exists(), f"{expected} is missing: run with LOOM_UPDATE_GOLDEN=1 to create it"
    assert result == expected.read_text(encoding="utf-8")


def test_every_pass_has_positive_and_negative_cases() -> None:
    """Each golden folder names a pass and holds both kinds of case (file names say which)."""
    folders = sorted({case.parent.name for case in CASES})
    assert folders == sorted(
        [
            "fuse_dead_store",
            "fuse_multi_channel",
            "fuse_multi_dst",
            "fuse_multimem",
            "fuse_paired_sends",
            "fuse_put_signal",
            "fuse_read_reduce_send",
            "fuse_reduce_chain",
            "fuse_reduce_copy_packet",
            "fuse_reduce_send",
            "fuse_reduce_send_packet",
            "dependencies",
            "instances",
            "resources",
        ]
    )
    for folder in folders:
        names = [case.name for case in CASES if case.parent.name == folder]
        assert any(not name.startswith("keeps_") for name in names), folder
        assert any(name.startswith("keeps_") for name in names), folder
