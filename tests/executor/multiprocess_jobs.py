"""Starting multi-process CPU-backend jobs for the tests: through ``python -m loom.launch`` or as plain
processes with torchrun's variables (so that a dead rank does not make a launcher stop the others), every
run under a hard subprocess timeout, and reading the ``RESULT {...}`` lines the worker prints."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
from pathlib import Path

WORKER = str(Path(__file__).with_name("multiprocess_worker.py"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def results(text: str) -> dict[int, list[dict]]:
    """RESULT lines by rank, in order (launcher output carries ``[rank K]`` prefixes; plain output does not)."""
    found: dict[int, list[dict]] = {}
    for line in text.splitlines():
        match = re.search(r"RESULT (\{.*\})$", line)
        if match:
            record = json.loads(match.group(1))
            found.setdefault(record["rank"], []).append(record)
    return found


def launch(nproc: int, *args: str, env: dict | None = None, limit_s: float = 60) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "loom.launch", "-n", str(nproc), "--timeout", str(int(limit_s)), WORKER, *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=limit_s + 15, env={**os.environ, **(env or {})}
    )


def start_ranks(
    nproc: int,
    *args: str,
    env: dict | None = None,
    port: int | None = None,
    ranks: range | list[int] | None = None,
    secret: str | None = None,
    program: str = WORKER,
) -> list[subprocess.Popen]:
    """The ranks (default: all) of ``program`` (default: the worker) as plain processes with torchrun's
    variables and the job's secret."""
    common = {
        **os.environ,
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "LOOM_BOOTSTRAP_ADDR": f"127.0.0.1:{port or free_port()}",
        "LOOM_BOOTSTRAP_SECRET": secret or secrets.token_hex(16),
        **(env or {}),
    }
    common.pop("LOOM_LAUNCHER", None)
    return [
        subprocess.Popen(
            [sys.executable, program, *args],
            env={**common, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (range(nproc) if ranks is None else ranks)
    ]


def finish(processes: list[subprocess.Popen], limit_s: float) -> tuple[list[int], str]:
    """Exit codes and joined output; any process still running after ``limit_s`` is killed and fails the test."""
    outputs, codes, hung = [], [], []
    for rank, process in enumerate(processes):
        try:
            out, _ = process.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
            hung.append(rank)
        outputs.append(out)
        codes.append(process.returncode)
    text = "\n".join(outputs)
    assert not hung, f"ranks {hung} still ran after {limit_s} s:\n{text[-4000:]}"
    return codes, text
