"""The broken-plan corpus (tests/data/plans/broken): each plan is a correct plan of
tests/compiler/verify/data broken in one way, and the verifier must report it with the right
category, at the right op, saying what is wrong. The correct plans must verify clean."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from loom.assembly import assemble_file
from loom.verify import CATEGORIES, format_findings, verify

ROOT = Path(__file__).resolve().parents[3]
BROKEN = ROOT / "tests" / "data" / "plans" / "broken"
GOOD = Path(__file__).with_name("data")


def _expected() -> list[tuple[str, str, str, str]]:
    rows = []
    for line in (BROKEN / "expected.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            file, category, where, fragment = line.split("\t")
            rows.append((file, category, where, fragment))
    return rows


EXPECTED = _expected()


def _body(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not line.startswith("#")]


def _base(path: Path) -> Path:
    header = next(line for line in path.read_text().splitlines() if line.startswith("# base: "))
    return ROOT / header.removeprefix("# base: ")


def test_the_corpus_is_complete():
    files = sorted(p.name for p in BROKEN.glob("*.txt"))
    assert files == sorted(row[0] for row in EXPECTED), "every broken plan has one line in expected.tsv"
    assert len(files) >= 20
    assert {row[1] for row in EXPECTED} == set(CATEGORIES), "every category is exercised"


@pytest.mark.parametrize("path", sorted(GOOD.glob("*.txt")), ids=lambda p: p.stem)
def test_correct_plans_verify_clean(path):
    findings = verify(assemble_file(path), calls=3)
    assert not findings, format_findings(findings)


@pytest.mark.parametrize("file", [row[0] for row in EXPECTED])
def test_each_broken_plan_is_a_correct_one_broken_in_one_way(file):
    path = BROKEN / file
    base = _base(path)
    assert base.parent == GOOD and base.exists(), base
    changed = [line for line in difflib.ndiff(_body(base), _body(path)) if line[:2] in ("+ ", "- ")]
    assert 0 < len(changed) <= 4, "\n".join(changed)


@pytest.mark.parametrize("row", EXPECTED, ids=[row[0].removesuffix(".txt") for row in EXPECTED])
def test_each_broken_plan_is_caught(row):
    file, category, where, fragment = row
    findings = verify(assemble_file(BROKEN / file))
    assert findings, f"{file}: no findings"
    matching = [f for f in findings if f.category == category and f.where == where and fragment in f.message]
    assert matching, f"{file}: no {category} finding at {where} saying {fragment!r}; got:\n{format_findings(findings)}"
    finding = matching[0]
    if finding.op_index is not None:
        assert finding.op_text and "@" not in finding.op_text  # the op in plan assembly; its loc apart
        assert str(finding).splitlines()[1].strip().startswith(finding.op_text)
