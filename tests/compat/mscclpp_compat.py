"""Port MSCCL++ DSL programs to Loom by their imports alone, compile and verify them, and report.

    python tests/compat/mscclpp_compat.py DIR [--report FILE.md] [--timeout SECONDS] [--mscclpp PATH]

DIR holds MSCCL++ DSL programs (any depth); nothing is fetched. To survey MSCCL++'s own, unpack them
from a checkout of github.com/microsoft/mscclpp, e.g.

    git -C mscclpp archive HEAD python/mscclpp/language/tests python/mscclpp/default_algos \\
        test/executor-tests/algos | tar -x -C /tmp/mscclpp-src

Every file that imports ``mscclpp.language`` is copied with ``mscclpp.language`` replaced by
``loom.language`` and a bare ``import mscclpp`` by ``import loom as mscclpp`` (nothing else changes: the
imports are the port) and compiled with ``loom compile`` (which verifies the plan).
A program's command line is what it needs: its defaults first; if that fails, a value for each argument
of REQUIRED_VALUES its parser declares (``--num_gpus`` 8, ``--gpus_per_node`` 4, ``--name`` the file's
stem, ...). Each
file ends as ``ok`` (compiled and verified) or with the first line of the error. Exit status 0 when every
program is ok, 1 otherwise.

With ``--mscclpp PATH`` (a PYTHONPATH under which ``import mscclpp.language`` finds MSCCL++'s own DSL, with
its dependency sortedcontainers), each program that compiles in Loom also runs, unchanged, under MSCCL++'s
DSL, and the report adds both plans' op counts (data ops / sync ops, nops aside, a pipeline's body ops
counted once) and whether ``loom import`` takes MSCCL++'s JSON of it (schema-checked and verified);
where it does, both plans then run on the CPU backend (ranks as threads) on the same random int32 data,
and their outputs must be equal bit for bit on every rank.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_runs import compare_runs  # noqa: E402

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
    "--tbg_size": "2",
    "--split_mask": "0x3",  # send_recv: rank r sends to r + 4 of 8 (not the ring)
}


# Ops that only order others, in either format (MSCCL++ writes relaxed ones as rlxsignal / rlxwait);
# "nop" counts as neither.
SYNC_OPS = frozenset({"signal", "wait", "rlxsignal", "rlxwait", "flush", "barrier", "sem_acquire", "sem_release"})


@dataclass
class Result:
    path: Path
    argv: list[str]
    error: str  # "" when the program compiled and verified
    loom_ops: tuple[int, int] | None = None  # (data, sync) in Loom's plan
    mscclpp_ops: tuple[int, int] | None = None  # the same in MSCCL++'s plan of the program
    imported: str = ""  # "ok", or why loom import refused MSCCL++'s plan
    same_run: str = ""  # "same" when both plans gave equal outputs on the CPU backend, else what differed
    loom_plan: str = ""  # Loom's plan text of the program

    @property
    def ok(self) -> bool:
        return not self.error


def port(source: Path, folder: Path) -> Path:
    """The program with its MSCCL++ imports pointed at Loom, written into ``folder``."""
    ported = folder / source.name
    text = source.read_text().replace("mscclpp.language", "loom.language")
    ported.write_text(re.sub(r"^import mscclpp$", "import loom as mscclpp", text, flags=re.MULTILINE))
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


def check(source: Path, folder: Path, timeout: float, mscclpp: str | None = None) -> Result:
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
    if done.returncode != 0:
        return Result(source, argv, _first_error(done.stdout + done.stderr))
    text = program.with_suffix(".json").read_text()
    result = Result(source, argv, "", loom_ops=op_counts(json.loads(text)), loom_plan=text)
    if mscclpp:
        _compare_with_mscclpp(result, mscclpp, timeout)
    return result


def op_counts(plan: dict) -> tuple[int, int]:
    """(data ops, sync ops) over every rank and thread block of an MSCCL++ or a Loom plan."""
    data = sync = 0
    for gpu in plan["gpus"]:
        for block in gpu["threadblocks"]:
            for op in block["ops"]:
                pipeline = op.get("op", op.get("name")) == "pipeline"
                for inner in op.get("body", op.get("ops", [])) if pipeline else [op]:  # Loom's, MSCCL++'s
                    name = inner.get("op", inner.get("name"))
                    if name in SYNC_OPS:
                        sync += 1
                    elif name != "nop":
                        data += 1
    return data, sync


def _compare_with_mscclpp(result: Result, mscclpp: str, timeout: float) -> None:
    """Runs the original program under MSCCL++'s DSL and imports the plan it prints."""
    from loom.interop import import_mscclpp_plan

    environment = {**os.environ, "PYTHONPATH": mscclpp}
    command = [sys.executable, str(result.path), *result.argv]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, check=False)
    except subprocess.TimeoutExpired:
        result.imported = f"MSCCL++'s DSL took longer than {timeout:g} s"
        return
    start = done.stdout.find("{")
    if done.returncode != 0 or start < 0:
        result.imported = "MSCCL++'s DSL failed: " + _first_error(done.stdout + done.stderr)
        return
    plan = json.loads(done.stdout[start:])
    result.mscclpp_ops = op_counts(plan)
    try:
        imported = import_mscclpp_plan(plan)
        result.imported = "ok"
    except Exception as error:  # noqa: BLE001 - any refusal is a row of the report
        result.imported = f"{type(error).__name__}: {str(error).splitlines()[0]}"[:300]
        return
    if any(c["type"] == "switch" for g in json.loads(imported)["gpus"] for c in g["channels"]):
        result.same_run = "not run: switch channels (NVLS) are not run by the executor"
    elif plan["collective"] != "test":  # a test plan has no collective to run
        result.same_run = compare_runs(result.loom_plan, imported)


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
    compared = [r for r in results if r.mscclpp_ops]
    if compared:
        fewer = sum(r.loom_ops[0] + r.loom_ops[1] <= r.mscclpp_ops[0] + r.mscclpp_ops[1] for r in compared)
        imported = sum(r.imported == "ok" for r in compared)
        lines[0:1] = [
            lines[0] + f"; of the {len(compared)} that also run under MSCCL++'s DSL, Loom's plan has no more ops"
            f" in {fewer}, and `loom import` takes MSCCL++'s plan of {imported}"
        ]
        same = sum(r.same_run == "same" for r in compared)
        lines[0] += f"; both plans give the same outputs on the CPU backend for {same}"
        lines += ["| program | arguments | result | ops Loom (data/sync) | ops MSCCL++ | loom import | same run |"]
        lines += ["|---|---|---|---|---|---|---|"]
    else:
        lines += ["| program | arguments | result |", "|---|---|---|"]
    for r in results:
        shown = r.error.replace("|", "\\|") if r.error else "ok"
        row = f"| `{r.path.relative_to(root)}` | `{' '.join(r.argv)}` | {shown} |"
        if compared:
            loom = f"{r.loom_ops[0]}/{r.loom_ops[1]}" if r.loom_ops else ""
            theirs = f"{r.mscclpp_ops[0]}/{r.mscclpp_ops[1]}" if r.mscclpp_ops else ""
            row += f" {loom} | {theirs} | {r.imported.replace('|', chr(92) + '|')} | {r.same_run} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a directory of MSCCL++ DSL programs")
    parser.add_argument("--report", type=Path, help="write the Markdown table here (default: print it)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per program")
    parser.add_argument(
        "--mscclpp", help="PYTHONPATH for MSCCL++'s own DSL: also compare op counts and import its plans"
    )
    args = parser.parse_args(argv)
    found = programs(args.folder)
    if not found:
        parser.error(f"{args.folder} holds no Python file that imports mscclpp.language")
    with tempfile.TemporaryDirectory(prefix="loom-compat-") as scratch:
        results = []
        for index, source in enumerate(found):
            folder = Path(scratch) / str(index)
            folder.mkdir()
            results.append(check(source, folder, args.timeout, args.mscclpp))
            print(f"{'ok  ' if results[-1].ok else 'FAIL'} {source.relative_to(args.folder)}", file=sys.stderr)
    text = report(results, args.folder)
    if args.report:
        args.report.write_text(text)
    print(text.splitlines()[0] if args.report else text)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
