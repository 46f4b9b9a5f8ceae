"""`loom compile`: library algorithms by name, user DSL files, options, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from loom.algorithms import names

PROGRAM = """
from loom.language import *

def build(world_size=2, instances=1):
    n = world_size
    with CollectiveProgram("user_sendrecv", SendRecv(n, 1, False), n, instances=instances) as program:
        for r in range(n):
            nxt, prv = (r + 1) % n, (r - 1) % n
            to_next, to_prev = MemoryChannel(nxt, r), MemoryChannel(prv, r)
            to_prev.signal(tb=0, relaxed=True)
            to_next.wait(tb=0, relaxed=True)
            to_next.put(Rank(nxt).get_output_buffer()[0:1], Rank(r).get_input_buffer()[0:1], tb=0)
            to_next.signal(tb=0)
            to_prev.wait(tb=0)
        return program
"""


def _loom(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loom", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_list_names_every_library_algorithm() -> None:
    result = _loom("compile", "--list")
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == sorted(names())


def test_compile_a_library_algorithm_with_an_option(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = _loom("compile", "allreduce_rs_ag_pipelined", "--world-size", "4", "-O", "iterations=8", "-o", str(out))
    assert result.returncode == 0, result.stderr
    plan = json.loads(out.read_text())
    assert (plan["collective"], plan["world_size"]) == ("allreduce", 4)
    pipelines = [op for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"] if op["op"] == "pipeline"]
    assert pipelines and all(op["iterations"] == 8 for op in pipelines)


def test_compile_a_user_file(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    result = _loom("compile", "prog.py", "--world-size", "4", "--instances", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert (plan["name"], plan["world_size"], plan["metadata"]["parameters"]["instances"]) == ("user_sendrecv", 4, 2)
    assert plan["gpus"][0]["threadblocks"][0]["ops"][0]["loc"] == {"file": "prog.py", "line": 10}


def test_errors_exit_1_with_a_message() -> None:
    result = _loom("compile", "nosuch", "--world-size", "4")
    assert result.returncode == 1
    assert "unknown algorithm 'nosuch'; the library has: allgather_" in result.stderr
    assert "allreduce_rs_ag, " in result.stderr
    result = _loom("compile", "allreduce_rs_ag")
    assert result.returncode == 1 and "--world-size is required" in result.stderr
    result = _loom("compile", "allreduce_rs_ag", "--world-size", "4", "-O", "iterations")
    assert result.returncode == 1 and "--option takes KEY=VALUE, got 'iterations'" in result.stderr
