"""`loom disasm` and `loom asm` through `python -m loom`, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from loom.plan.canonical import canonical_plan_text

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parent / "data"
EXAMPLE = REPO / "examples" / "plans" / "allreduce_2r_simple.json"
KITCHEN_SINK = REPO / "tests" / "data" / "plans" / "good" / "kitchen_sink_ll.json"


def _loom(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loom", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=60
    )


def test_disasm_prints_to_stdout() -> None:
    result = _loom("disasm", KITCHEN_SINK)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (DATA / "kitchen_sink_ll.txt").read_text(encoding="utf-8")
    assert result.stderr == ""


def test_disasm_then_asm_round_trips_through_files(tmp_path: Path) -> None:
    text_file, json_file = tmp_path / "plan.txt", tmp_path / "plan.json"
    result = _loom("disasm", EXAMPLE, "-o", text_file)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert text_file.read_text(encoding="utf-8").startswith("plan allreduce_2r_simple\n")
    result = _loom("asm", text_file, "-o", json_file)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert json_file.read_text(encoding="utf-8") == canonical_plan_text(json.loads(EXAMPLE.read_text(encoding="utf-8")))


def test_asm_prints_canonical_json_to_stdout() -> None:
    result = _loom("asm", DATA / "broadcast_handwritten.txt")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (DATA / "broadcast_handwritten.json").read_text(encoding="utf-8")


def test_asm_error_exits_1_with_file_line_and_column(tmp_path: Path) -> None:
    text = (DATA / "broadcast_handwritten.txt").read_text(encoding="utf-8")
    bad = tmp_path / "bad.txt"
    bad.write_text(text.replace("    sem_acquire sem0\n", "    sem_acquire sem0\n    teleport input[0] -> output[0]\n"))
    out = tmp_path / "out.json"
    result = _loom("asm", bad, "-o", out)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"loom asm: {bad}: line 25 column 5: unknown op 'teleport'")
    assert not out.exists()


def test_asm_schema_error_names_the_line(tmp_path: Path) -> None:
    text = (DATA / "broadcast_handwritten.txt").read_text(encoding="utf-8")
    bad = tmp_path / "no_root.txt"
    bad.write_text(text.replace("collective broadcast  root 0", "collective broadcast"))
    result = _loom("asm", bad)
    assert result.returncode == 1
    assert result.stderr == f"loom asm: {bad}: line 3: root: missing required field\n"


def test_asm_missing_file_exits_1(tmp_path: Path) -> None:
    result = _loom("asm", tmp_path / "absent.txt")
    assert result.returncode == 1
    assert (
        result.stderr
        == f"loom asm: cannot open plan assembly file '{tmp_path / 'absent.txt'}': No such file or directory\n"
    )


def test_disasm_refuses_a_plan_that_fails_the_schema(tmp_path: Path) -> None:
    plan = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    plan["gpus"][0]["threadblocks"][0]["ops"][0]["src"]["buffer"] = "inptu"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(plan))
    result = _loom("disasm", bad)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"loom disasm: {bad}: gpus[0].threadblocks[0].ops[0].src.buffer: 'inptu'")


def test_disasm_reports_bad_json(tmp_path: Path) -> None:
    bad = tmp_path / "truncated.json"
    bad.write_text('{"format_version": 1,')
    result = _loom("disasm", bad)
    assert result.returncode == 1
    assert result.stderr.startswith(f"loom disasm: {bad}: $: invalid JSON: ")
