"""The MSCCL++ compatibility suite (mscclpp_compat.py) on its fixtures: MSCCL++-style programs written
for Loom, ported by their imports alone, compile and verify; a program that does not is reported with
its error. docs/dsl.md has the suite's numbers on MSCCL++'s own programs."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mscclpp_compat  # noqa: E402


def test_the_fixture_programs_port_by_their_imports(tmp_path):
    report = tmp_path / "report.md"
    assert mscclpp_compat.main([str(HERE / "programs"), "--report", str(report)]) == 0
    text = report.read_text()
    assert text.startswith("4 of 4 programs compile and verify"), text


def test_a_program_that_does_not_port_is_reported_with_its_error(tmp_path):
    source = (HERE / "programs" / "unit_copy.py").read_text()
    (tmp_path / "out_of_range.py").write_text(source.replace("get_output_buffer()[0:2]", "get_output_buffer()[1:3]"))
    report = tmp_path / "report.md"
    assert mscclpp_compat.main([str(tmp_path), "--report", str(report)]) == 1
    text = report.read_text()
    assert text.startswith("0 of 1 programs") and "| `out_of_range.py` |" in text, text
    assert "loom compile: out_of_range.py:" in text, text
