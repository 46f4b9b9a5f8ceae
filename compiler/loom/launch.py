"""Start the ranks of a job on this host: ``python -m loom.launch -n N [--timeout S] script.py args...``.

Each rank is a process with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` set, plus
what ``loom._native.Bootstrap.from_environment()`` needs: ``LOOM_BOOTSTRAP_ADDR`` (where rank 0
listens), ``LOOM_BOOTSTRAP_SECRET`` (a fresh random secret) and ``LOOM_LAUNCHER=loom``. The launcher
opens rank 0's listening socket itself and hands it to rank 0 (``LOOM_BOOTSTRAP_LISTEN_FD``), so no
other program can take the port between choosing it and using it.

Output lines are forwarded with a ``[rank K]`` prefix. When a rank fails, the others are stopped
(SIGTERM, then SIGKILL after a grace period) and the launcher exits with that rank's exit code; when
``--timeout`` passes, every rank is stopped and the launcher exits with 124. Either way it says which
rank and why on stderr.

This module needs only the standard library: it runs scripts that never touch the native module.
"""

from __future__ import annotations

import argparse
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import BinaryIO

EXIT_TIMEOUT = 124
STOP_GRACE_S = 3.0
POLL_S = 0.1
MAX_RANKS = 1024


def rank_environment(
    rank: int, world_size: int, address: str, secret: str, base: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of one rank: ``base`` (default: this process's) plus the launcher's variables."""
    env = dict(os.environ if base is None else base)
    env.pop("LOOM_BOOTSTRAP_LISTEN_FD", None)  # set again for rank 0 only, with its own descriptor
    env.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size),
            "LOOM_LAUNCHER": "loom",
            "LOOM_BOOTSTRAP_ADDR": address,
            "LOOM_BOOTSTRAP_SECRET": secret,
            "PYTHONUNBUFFERED": "1",  # so that a rank's lines arrive while it runs, not when it exits
        }
    )
    return env


def _open_listener(host: str, backlog: int) -> tuple[socket.socket, str]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, 0), family=family, backlog=backlog)
    port = listener.getsockname()[1]
    address = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
    return listener, address


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _exit_status(code: int) -> int:
    return 128 - code if code < 0 else code


def _rank_list(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


class _Output:
    """Forwards the lines of every rank's stdout and stderr with a ``[rank K]`` prefix."""

    def __init__(self, stdout: BinaryIO, stderr: BinaryIO) -> None:
        self._streams = {"stdout": stdout, "stderr": stderr}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def follow(self, rank: int, pipe: BinaryIO, stream: str) -> None:
        thread = threading.Thread(target=self._copy, args=(rank, pipe, stream), daemon=True)
        thread.start()
        self._threads.append(thread)

    def _copy(self, rank: int, pipe: BinaryIO, stream: str) -> None:
        prefix = f"[rank {rank}] ".encode()
        out = self._streams[stream]
        with pipe:
            for line in iter(pipe.readline, b""):
                if not line.endswith(b"\n"):
                    line += b"\n"
                with self._lock:
                    out.write(prefix + line)
                    out.flush()

    def note(self, message: str) -> None:
        with self._lock:
            self._streams["stderr"].write(f"loom.launch: {message}\n".encode())
            self._streams["stderr"].flush()

    def join(self, timeout_s: float) -> None:
        # A grandchild that escaped the rank's process group may hold a pipe open: do not wait forever.
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def _stop(processes: Sequence[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM to every rank's process group still running, then SIGKILL to those that stay."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in running:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for process in processes:
        # The group, not just the rank: helpers it started go too (the rank may already be gone).
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def launch(
    command: Sequence[str],
    nproc: int,
    *,
    timeout_s: float | None = None,
    host: str = "127.0.0.1",
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
    env: dict[str, str] | None = None,
    grace_s: float = STOP_GRACE_S,
) -> int:
    """Run ``command`` as ``nproc`` ranks on this host; return the exit status the launcher exits with.

    0 when every rank succeeds; the first failing rank's exit code (128 + N for a rank killed by
    signal N); 124 when ``timeout_s`` passes first; 128 + N when the launcher gets signal N.
    """
    if nproc < 1 or nproc > MAX_RANKS:
        raise ValueError(f"the number of ranks must be 1 to {MAX_RANKS}, not {nproc}")
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError(f"the timeout must be positive, not {timeout_s}")
    output = _Output(stdout or sys.stdout.buffer, stderr or sys.stderr.buffer)
    listener, address = _open_listener(host, backlog=max(128, nproc))
    secret = secrets.token_hex(16)
    exits: queue.Queue[tuple[int, int]] = queue.Queue()
    processes: list[subprocess.Popen] = []
    start = time.monotonic()
    interrupted: list[int] = []
    # The handler only records the signal: the supervising loop looks at it at least every POLL_S.
    previous_handlers = _catch_signals(interrupted.append)
    try:
        with listener:
            for rank in range(nproc):
                rank_env = rank_environment(rank, nproc, address, secret, env)
                pass_fds: tuple[int, ...] = ()
                if rank == 0:
                    rank_env["LOOM_BOOTSTRAP_LISTEN_FD"] = str(listener.fileno())
                    pass_fds = (listener.fileno(),)
                # Its own session, so that stopping a rank also stops whatever it started.
                process = subprocess.Popen(
                    list(command),
                    env=rank_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                    pass_fds=pass_fds,
                    start_new_session=True,
                )
                processes.append(process)
                output.follow(rank, process.stdout, "stdout")
                output.follow(rank, process.stderr, "stderr")
                threading.Thread(target=lambda r=rank, p=process: exits.put((r, p.wait())), daemon=True).start()
        return _supervise(processes, exits, output, start, timeout_s, interrupted, grace_s)
    except BaseException:
        _stop(processes, grace_s)
        raise
    finally:
        _restore_signals(previous_handlers)
        output.join(timeout_s=5.0)


def _supervise(
    processes: list[subprocess.Popen],
    exits: queue.Queue[tuple[int, int]],
    output: _Output,
    start: float,
    timeout_s: float | None,
    interrupted: list[int],
    grace_s: float,
) -> int:
    running = set(range(len(processes)))
    while running:
        if interrupted:
            signum = interrupted[0]
            output.note(f"got {signal.Signals(signum).name}; stopping {_rank_list(sorted(running))}")
            _stop(processes, grace_s)
            return 128 + signum
        remaining = POLL_S if timeout_s is None else timeout_s - (time.monotonic() - start)
        if remaining <= 0:
            ranks = sorted(running)
            output.note(f"timeout: {timeout_s:g} s passed with {_rank_list(ranks)} still running; stopping them")
            _stop(processes, grace_s)
            return EXIT_TIMEOUT
        try:
            rank, code = exits.get(timeout=min(remaining, POLL_S))
        except queue.Empty:
            continue
        running.discard(rank)
        if code != 0:
            others = sorted(running)
            stopping = f"; stopping {_rank_list(others)}" if others else ""
            output.note(f"rank {rank} {_describe_exit(code)}{stopping}")
            _stop(processes, grace_s)
            output.note(f"failed: rank {rank} {_describe_exit(code)} (the first rank to fail)")
            return _exit_status(code)
    return 0


def _catch_signals(handler) -> dict[int, object]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[signum] = signal.signal(signum, lambda s, _frame: handler(s))
    return previous


def _restore_signals(previous: dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loom.launch",
        description="Start N ranks of a program on this host, with the environment Loom's bootstrap reads.",
    )
    parser.add_argument("-n", "--nproc", type=int, required=True, help="number of ranks")
    parser.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="stop every rank after S seconds (exit 124)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address rank 0 listens on (default 127.0.0.1)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("-m", "--module", action="store_true", help="run SCRIPT as a module, like python -m")
    mode.add_argument("--no-python", action="store_true", help="run SCRIPT as a program, not with Python")
    parser.add_argument("script", help="the Python file (or module, or program) each rank runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    options = parser.parse_args(argv)
    if options.nproc < 1 or options.nproc > MAX_RANKS:
        parser.error(f"-n: the number of ranks must be 1 to {MAX_RANKS}, not {options.nproc}")
    if options.timeout is not None and options.timeout <= 0:
        parser.error(f"--timeout: must be positive, not {options.timeout:g}")
    if options.no_python:
        command = [options.script, *options.args]
    elif options.module:
        command = [sys.executable, "-m", options.script, *options.args]
    else:
        command = [sys.executable, options.script, *options.args]
    try:
        return launch(command, options.nproc, timeout_s=options.timeout, host=options.host)
    except OSError as error:
        print(f"loom.launch: cannot start {options.script}: {error}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
