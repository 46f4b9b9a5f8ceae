"""The README's example runs as printed (issue 55): a DSL algorithm compiled, verified, registered and run on
the CPU backend, in 15 lines or fewer, printing what the README says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("loom._native", reason="the native module is not built")
README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    text = README.read_text()
    section = text[text.index("## Your own algorithm") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs_and_prints_what_it_says(tmp_path):
    code = _example()
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 15, lines
    promised = lines[-1].split("# ", 1)[1]
    environment = {**os.environ, "LOOM_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environment, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == promised, done.stdout
