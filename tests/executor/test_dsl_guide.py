"""The rules of docs/dsl.md's "Rules that keep a plan right", each with its example (examples/dsl/): the example
compiles with `loom compile` (which verifies it) and runs right on the CPU backend, one process per rank (the
multi-node one as processes acting as two hosts, examples/dsl/run_on_cpu.py); broken as the guide says, the
verifier refuses it, naming what is wrong, and run_on_cpu.py refuses to run it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from loom.compiler.emit import emit_plan_text
from loom.verify import verify

pytest.importorskip("loom._native", reason="the native module is not built")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "dsl"
GUIDE = (ROOT / "docs" / "dsl.md").read_text(encoding="utf-8")

# example, world size, hosts, the keyword that breaks it, what the verifier then says
RULES = [
    ("handshake", 4, 1, "handshake", "unordered with the user's read of the result"),
    ("port_flush", 2, 2, "flush", "flush the channel first"),
    ("channel_pairing", 2, 1, "paired", "cyclic wait"),
]


def _build(example: str, **arguments: object) -> str:
    spec = importlib.util.spec_from_file_location(example, EXAMPLES / f"{example}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return emit_plan_text(module.build(**arguments))


def _run_on_cpu(plan: Path, world: int, hosts: int, cache: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "loom.launch", "-n", str(world), str(EXAMPLES / "run_on_cpu.py"), str(plan)]
    environment = {**os.environ, "LOOM_CACHE_DIR": str(cache)}
    return subprocess.run(
        [*command, "--hosts", str(hosts)], env=environment, capture_output=True, text=True, timeout=100
    )


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("example", "world", "hosts", "breaking", "finding"), RULES, ids=[rule[0] for rule in RULES])
def test_each_rule_of_the_guide_compiles_runs_right_and_broken_is_refused(
    example, world, hosts, breaking, finding, tmp_path
):
    assert f"examples/dsl/{example}.py" in GUIDE, "the guide shows the example"
    plan = tmp_path / f"{example}.json"
    compiled = subprocess.run(
        [
            sys.executable,
            "-m",
            "loom",
            "compile",
            str(EXAMPLES / f"{example}.py"),
            "--world-size",
            str(world),
            "-o",
            str(plan),
        ],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    run = _run_on_cpu(plan, world, hosts, tmp_path / "cache")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count("5 of 5 calls right") == world, run.stdout
    if hosts > 1:
        assert "on host1" in run.stdout, run.stdout  # the ranks acted as two hosts

    broken = _build(example, world_size=world, **{breaking: False})
    findings = verify(json.loads(broken), calls=3)
    assert any(finding in str(found) for found in findings), findings
    (tmp_path / "broken.json").write_text(broken)
    refused = _run_on_cpu(tmp_path / "broken.json", world, hosts, tmp_path / "cache")
    assert refused.returncode != 0 and finding in refused.stdout + refused.stderr, refused.stderr[-2000:]
