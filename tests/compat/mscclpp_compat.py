"""Port MSCCL++ DSL programs to Loom by their imports alone, compile and verify them, and report.

    python tests/compat/mscclpp_compat.py DIR [--report FILE.md] [--timeout SECONDS]

DIR holds MSCCL++ DSL programs (any depth); nothing is fetched. To survey MSCCL++'s own, unpack them
from a checkout of github.com/microsoft/mscclpp, e.g.

    git -C mscclpp archive HEAD python/mscclpp/language/tests python/mscclpp/default_algos \\
        test/executor-tests/algos | tar -x -C /tmp/mscclpp-src

Every file that imports ``mscclpp.language`` is copied with ``mscclpp.language`` replaced by
``loom.language`` (nothing else changes) and compiled with ``loom compile`` (which verifies the plan).
A program's command line is what it needs: its defaults first; if that fails, a value for each argument
of REQUIRED_VALUES its parser declares (``--num_gpus`` 8, ``--gpus_per_node`` 4, ``--name`` the file's
stem, ...). Each
file ends as ``ok`` (compiled and verified) or with the first line of the error. Exit status 0 when every
program is ok, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Values for arguments a program's parser requires, by name; anything else gets "1".
REQUIRED_VALUES = {
    "--name": None,  # the file's stem
    "--num_gpus": "8",
    "--gpus_per_node": "4",
    "--nnodes": "2",
    "--num_threads_per_block": "1024",
    "--min_message_size": "1024",  # some programs refuse smaller minimums for their instances
    "--max_message_size": "1048576",
    "--instances": "1",
}


@dataclass
class Result:
    path: Path
    argv: list[str]
    error: str  # "" when the program compiled and verified

    @property
    def ok(self) -> bool:
        return not self.error


def port(source: Path, folder: Path) -> Path:
    """The program with its MSCCL++ imports pointed at Loom, written into ``folder``."""
    ported = folder / source.name
    ported.write_text(source.read_text().replace("mscclpp.language", "loom.language"))
    return ported


def _compile(program: Path, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "loom", "compile", str(program), "-o", str(program.with_suffix(".json"))]
    command += ["--argv", " ".join(argv)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, cwd=program.parent)


def _arguments(source: Path) -> list[str]:
    """Values for the arguments in REQUIRED_VALUES that the program's parser declares."""
    text = source.read_text(errors="replace")
    argv: list[str] = []
    for name, value in REQUIRED_VALUES.items():
        if re.search(rf"""add_argument\(\s*["']{name}["']""", text):
            argv += [name, source.stem if value is None else value]
    return argv


def _first_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("loom compile:", "loom:")):
            return line[:300]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]+(Error|Exception)\b", line):
            return line[:300]
    return (lines[-1] if lines else "no output")[:300]


def check(source: Path, folder: Path, timeout: float) -> Result:
    """Compiled with the program's defaults; when that fails, with values for the arguments it declares."""
    program = port(source, folder)
    argv: list[str] = []
    try:
        done = _compile(program, argv, timeout)
        if done.returncode != 0 and _arguments(source):
            argv = _arguments(source)
            done = _compile(program, argv, timeout)
    except subprocess.TimeoutExpired:
        return Result(source, argv, f"took longer than {timeout:g} s")
    if done.returncode == 0:
        return Result(source, argv, "")
    return Result(source, argv, _first_error(done.stdout + done.stderr))


def programs(folder: Path) -> list[Path]:
    """The files that import mscclpp.language and are programs: they print a plan or define build()
    (a module of functions only, such as MSCCL++'s default_algos/reducescatter_multi_nodes.py, which its
    package calls, is not)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(errors="replace")
        if "mscclpp.language" in text and re.search(r"print\(|__main__|^def build\(", text, re.MULTILINE):
            found.append(path)
    return found


def report(results: list[Result], root: Path) -> str:
    ok = sum(r.ok for r in results)
    lines = [f"{ok} of {len(results)} programs compile and verify by the import change alone", ""]
    lines += ["| program | arguments | result |", "|---|---|---|"]
    for r in results:
        shown = r.error.replace("|", "\\|") if r.error else "ok"
        lines.append(f"| `{r.path.relative_to(root)}` | `{' '.join(r.argv)}` | {shown} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a directory of MSCCL++ DSL programs")
    parser.add_argument("--report", type=Path, help="write the Markdown table here (default: print it)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per program")
    args = parser.parse_args(argv)
    found = programs(args.folder)
    if not found:
        parser.error(f"{args.folder} holds no Python file that imports mscclpp.language")
    with tempfile.TemporaryDirectory(prefix="loom-compat-") as scratch:
        results = []
        for index, source in enumerate(found):
            folder = Path(scratch) / str(index)
            folder.mkdir()
            results.append(check(source, folder, args.timeout))
            print(f"{'ok  ' if results[-1].ok else 'FAIL'} {source.relative_to(args.folder)}", file=sys.stderr)
    text = report(results, args.folder)
    if args.report:
        args.report.write_text(text)
    print(text.splitlines()[0] if args.report else text)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
