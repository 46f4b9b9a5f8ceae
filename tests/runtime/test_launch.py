"""`python -m loom.launch`: rank environment, output prefixes, failure and timeout handling, and a
4-rank bootstrap all-gather through loom._native (skipped when the native module is missing)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from loom import launch

try:
    from loom import _native
except ImportError as error:  # pragma: no cover - the native build is part of the normal set-up
    _native = None
    _NATIVE_MISSING = f"loom._native cannot be imported ({error}); build it with 'bash scripts/setup.sh'"
else:
    _NATIVE_MISSING = ""

needs_native = pytest.mark.skipif(_native is None, reason=_NATIVE_MISSING)

# Every launcher run in these tests is bounded; a hang is a failure, not a stuck CI job.
RUN_LIMIT_S = 60


def _script(tmp_path: Path, body: str, name: str = "rank.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def _launch(*args: str, python_prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    command = [*(python_prefix or [sys.executable, "-m", "loom.launch"]), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_LIMIT_S)


def _rank_lines(text: str) -> dict[int, list[str]]:
    lines: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = re.fullmatch(r"\[rank (\d+)\] (.*)", line)
        if match:
            lines.setdefault(int(match.group(1)), []).append(match.group(2))
    return lines


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes; /proc tells them apart.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_ranks_get_their_environment(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import json, os
        names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOOM_LAUNCHER",
                 "LOOM_BOOTSTRAP_ADDR", "LOOM_BOOTSTRAP_SECRET", "LOOM_BOOTSTRAP_LISTEN_FD"]
        print(json.dumps({name: os.environ.get(name) for name in names}))
        """,
    )
    result = _launch("-n", "3", str(script))
    assert result.returncode == 0, result.stderr
    envs = {rank: json.loads(lines[0]) for rank, lines in _rank_lines(result.stdout).items()}
    assert sorted(envs) == [0, 1, 2]
    for rank, env in envs.items():
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "3"
        assert env["LOOM_LAUNCHER"] == "loom"
        assert re.fullmatch(r"127\.0\.0\.1:\d+", env["LOOM_BOOTSTRAP_ADDR"])
        assert re.fullmatch(r"[0-9a-f]{32}", env["LOOM_BOOTSTRAP_SECRET"])
        assert (env["LOOM_BOOTSTRAP_LISTEN_FD"] is not None) == (rank == 0)
    assert len({env["LOOM_BOOTSTRAP_ADDR"] for env in envs.values()}) == 1
    assert len({env["LOOM_BOOTSTRAP_SECRET"] for env in envs.values()}) == 1
    # A new job gets a new secret.
    again = _launch("-n", "1", str(script))
    assert json.loads(_rank_lines(again.stdout)[0][0])["LOOM_BOOTSTRAP_SECRET"] != envs[0]["LOOM_BOOTSTRAP_SECRET"]


def test_output_is_prefixed_per_stream(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import os, sys
        rank = os.environ["RANK"]
        print("out", rank)
        print("err", rank, file=sys.stderr)
        sys.stdout.write("no newline " + rank)
        """,
    )
    result = _launch("-n", "2", str(script), "ignored-arg")
    assert result.returncode == 0, result.stderr
    out = _rank_lines(result.stdout)
    err = _rank_lines(result.stderr)
    for rank in (0, 1):
        assert out[rank] == [f"out {rank}", f"no newline {rank}"]
        assert err[rank] == [f"err {rank}"]


def test_arguments_reach_the_script_and_module_and_program_modes(tmp_path: Path) -> None:
    script = _script(tmp_path, "import sys\nprint(sys.argv[1:])\n", name="show_args.py")
    result = _launch("-n", "1", str(script), "-n", "5", "--timeout", "x")
    assert _rank_lines(result.stdout)[0] == ["['-n', '5', '--timeout', 'x']"]
    result = subprocess.run(
        [sys.executable, "-m", "loom.launch", "-n", "2", "-m", "show_args", "a"],
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT_S,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert _rank_lines(result.stdout) == {0: ["['a']"], 1: ["['a']"]}
    result = _launch("-n", "2", "--no-python", "sh", "-c", 'echo "shell $RANK"')
    assert _rank_lines(result.stdout) == {0: ["shell 0"], 1: ["shell 1"]}


def test_launcher_runs_without_the_native_module(tmp_path: Path) -> None:
    script = _script(tmp_path, "import os\nprint('plain', os.environ['RANK'])\n")
    # The launcher process itself cannot import loom._native: it must not need to.
    blocked = (
        "import runpy, sys; sys.modules['loom._native'] = None; "
        "sys.argv = ['loom.launch'] + sys.argv[1:]; runpy.run_module('loom.launch', run_name='__main__')"
    )
    result = _launch("-n", "2", str(script), python_prefix=[sys.executable, "-c", blocked])
    assert result.returncode == 0, result.stderr
    assert _rank_lines(result.stdout) == {0: ["plain 0"], 1: ["plain 1"]}


def test_failing_rank_stops_the_others_and_sets_the_exit_code(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import os, sys, time
        rank = int(os.environ["RANK"])
        if rank == 2:
            time.sleep(0.2)
            print("giving up", file=sys.stderr)
            sys.exit(3)
        time.sleep(60)
        print("should have been stopped")
        """,
    )
    start = time.monotonic()
    result = _launch("-n", "4", str(script))
    assert time.monotonic() - start < 15
    assert result.returncode == 3
    assert "should have been stopped" not in result.stdout
    assert "[rank 2] giving up" in result.stderr
    assert "loom.launch: rank 2 exited with code 3; stopping ranks 0, 1, 3" in result.stderr
    assert "loom.launch: failed: rank 2 exited with code 3 (the first rank to fail)" in result.stderr


def test_rank_killed_by_a_signal(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import os, signal, time
        if os.environ["RANK"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
        """,
    )
    result = _launch("-n", "2", str(script))
    assert result.returncode == 128 + 9
    assert "failed: rank 1 was killed by SIGKILL" in result.stderr


def test_timeout_stops_a_hanging_rank(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import os, time
        if os.environ["RANK"] == "1":
            time.sleep(60)
        """,
    )
    start = time.monotonic()
    result = _launch("-n", "2", "--timeout", "1", str(script))
    assert time.monotonic() - start < 10
    assert result.returncode == launch.EXIT_TIMEOUT
    assert "loom.launch: timeout: 1 s passed with rank 1 still running; stopping them" in result.stderr


def test_timeout_kills_a_rank_that_ignores_sigterm_and_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = _script(
        tmp_path,
        f"""
        import os, signal, subprocess, time
        if os.environ["RANK"] == "0":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            child = subprocess.Popen(["sleep", "60"])
            with open({str(pids)!r}, "w") as f:
                f.write(f"{{os.getpid()}} {{child.pid}}")
            time.sleep(60)
        """,
    )
    out, err = io.BytesIO(), io.BytesIO()
    start = time.monotonic()
    code = launch.launch([sys.executable, str(script)], 2, timeout_s=1.0, stdout=out, stderr=err, grace_s=0.5)
    assert time.monotonic() - start < 10
    assert code == launch.EXIT_TIMEOUT
    assert b"timeout: 1 s passed with rank 0 still running" in err.getvalue()
    rank_pid, child_pid = (int(pid) for pid in pids.read_text().split())
    # SIGKILL to the group is delivered asynchronously: on a loaded machine the child may take a moment to go.
    gone_by = time.monotonic() + 2.0
    while (_alive(rank_pid) or _alive(child_pid)) and time.monotonic() < gone_by:
        time.sleep(0.02)
    assert not _alive(rank_pid)
    assert not _alive(child_pid)


def test_bad_arguments() -> None:
    result = _launch("-n", "0", "x.py")
    assert result.returncode == 2
    assert "the number of ranks must be 1 to 1024, not 0" in result.stderr
    result = _launch("-n", "1", "--timeout", "-1", "x.py")
    assert result.returncode == 2
    assert "--timeout: must be positive" in result.stderr
    result = _launch("-n", "1", "--no-python", "/nonexistent/program")
    assert result.returncode == 127
    assert "cannot start /nonexistent/program" in result.stderr
    with pytest.raises(ValueError, match="1 to 1024"):
        launch.launch(["true"], 0)


@needs_native
def test_four_ranks_all_gather_through_the_native_bootstrap(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import hashlib, json
        from loom import _native

        bootstrap = _native.Bootstrap.from_environment(timeout_ms=20000)
        rank, world = bootstrap.rank, bootstrap.world_size
        # Different sizes per rank, from empty to a quarter MiB.
        mine = hashlib.sha256(str(rank).encode()).digest() * (rank * 2731)
        blocks = bootstrap.all_gather(mine)
        bootstrap.send((rank + 1) % world, 11, b"token from %d" % rank)
        token = bootstrap.recv((rank - 1) % world, 11)
        bootstrap.barrier()
        env = _native.launch_environment()
        print(json.dumps({
            "rank": rank, "world": world, "launcher": env["launcher"],
            "secret_from_environment": env["secret_from_environment"],
            "digests": [hashlib.sha256(b).hexdigest() for b in blocks],
            "sizes": [len(b) for b in blocks], "token": token.decode(),
        }))
        """,
    )
    result = _launch("-n", "4", "--timeout", "50", str(script))
    assert result.returncode == 0, result.stdout + result.stderr
    reports = {rank: json.loads(lines[-1]) for rank, lines in _rank_lines(result.stdout).items()}
    assert sorted(reports) == [0, 1, 2, 3]
    expected = [hashlib.sha256(hashlib.sha256(str(r).encode()).digest() * (r * 2731)).hexdigest() for r in range(4)]
    for rank, report in reports.items():
        assert report["world"] == 4
        assert report["launcher"] == "loom.launch"
        assert report["secret_from_environment"] is True
        assert report["digests"] == expected
        assert report["sizes"] == [0, 32 * 2731, 64 * 2731, 96 * 2731]
        assert report["token"] == f"token from {(rank - 1) % 4}"


@needs_native
def test_rank_that_never_joins_is_named_by_rank_0(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import os, sys
        import loom
        from loom import _native
        if os.environ["RANK"] == "2":
            sys.exit(0)  # leaves without joining, and without failing
        try:
            _native.Bootstrap.from_environment(timeout_ms=1000)
        except loom.LoomTimeoutError as error:
            print("timeout:", error)
            sys.exit(5)
        """,
    )
    result = _launch("-n", "3", str(script))
    assert result.returncode == 5
    lines = _rank_lines(result.stdout)
    failed = re.search(r"failed: rank (\d) exited with code 5", result.stderr)
    assert failed, result.stderr
    # Whichever rank failed first, it names rank 2: the root itself, or a rank that asked the root.
    assert re.search(r"rank 2 (did not|has not) arrive", " ".join(lines[int(failed.group(1))])), result.stdout
