"""Compile entry points: a library algorithm by name, a user's DSL file or function, into plan JSON text.

These are the functions behind ``loom compile``; each returns the canonical plan text (the same
inputs always give the same bytes) and raises :class:`loom.errors.InvalidArgumentError` for bad
arguments or :class:`loom.errors.DSLError` for a program that cannot compile.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import os
import runpy
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loom.algorithms import get
from loom.compiler import emit
from loom.errors import DSLError, InvalidArgumentError, LoomError
from loom.ir.model import SourceLoc
from loom.language.program import CollectiveProgram
from loom.plan.schema import check_schema


def build_algorithm(
    name: str,
    world_size: int,
    ranks_per_node: int | None = None,
    *,
    instances: int = 1,
    inplace: bool = False,
    plan_name: str | None = None,
    **options: Any,
) -> CollectiveProgram:
    """Record library algorithm ``name`` for the given shape; see :func:`compile_algorithm`."""
    algorithm = get(name)
    return algorithm.build(world_size, ranks_per_node, instances=instances, inplace=inplace, name=plan_name, **options)


def compile_algorithm(
    name: str,
    world_size: int,
    ranks_per_node: int | None = None,
    *,
    instances: int = 1,
    inplace: bool = False,
    plan_name: str | None = None,
    verify: bool = True,
    **options: Any,
) -> str:
    """Compile library algorithm ``name`` (see :func:`list_algorithms`) into canonical plan JSON text.

    ``ranks_per_node`` defaults to ``world_size`` (one node). ``instances`` replicates the program
    over disjoint parts of every chunk; ``inplace`` makes input and output one buffer;
    ``plan_name`` overrides the plan's name (default ``<algorithm>_<shape>``). ``options`` are the
    algorithm's own (``iterations``, ``root``) and the common ``min_message_size``,
    ``max_message_size``, ``num_threads_per_block``. Unknown names, shapes or options raise
    InvalidArgumentError saying what is supported. With ``verify`` (the default) the emitted plan
    is run through the plan verifier (``loom.verify``, three calls), and a plan it finds wrong raises
    ``loom.verify.VerificationError`` listing the findings.
    """
    program = build_algorithm(
        name, world_size, ranks_per_node, instances=instances, inplace=inplace, plan_name=plan_name, **options
    )
    return _verified(emit.emit_plan_text(program), verify)


def list_algorithms() -> list[dict[str, Any]]:
    """Every library algorithm as plain data: name, collective, protocol, summary, world_sizes
    (one node), multi_node ([nodes, ranks_per_node] pairs), min/max_message_bytes, options."""
    from loom.algorithms import ALGORITHMS

    return [ALGORITHMS[name].describe() for name in sorted(ALGORITHMS)]


def compile_file(
    path: str | os.PathLike[str],
    *,
    world_size: int | None = None,
    ranks_per_node: int | None = None,
    instances: int | None = None,
    argv: list[str] | None = None,
    verify: bool = True,
    **options: Any,
) -> str:
    """Compile the DSL program in the Python file ``path`` into canonical plan JSON text.

    The file runs as a module named ``__loom_compile__`` (so ``if __name__ == "__main__":`` blocks
    do not run), with ``sys.argv = [path, *argv]`` and its own directory first on ``sys.path``.
    Then:

    - if it defines ``build``, that is called with the keyword arguments given here
      (``world_size``, ``ranks_per_node``, ``instances`` when not None, and ``options``) and must
      return a CollectiveProgram, which is compiled;
    - otherwise the plan it printed (``print(JSON())``, as MSCCL++ programs do) is the result; it
      is checked against the schema. ``world_size`` etc. cannot be passed to such a file: given,
      they must match the printed plan;
    - a file that did neither but has an ``if __name__ == "__main__":`` block (MSCCL++'s default
      algorithms print their plan from there) runs again as ``__main__``, as ``python FILE.py``
      would run it, and the plan that prints is the result.

    Anything else the file prints goes to stderr. ``verify`` runs the plan verifier on the result,
    as for :func:`compile_algorithm`.
    """
    file = Path(path)
    if not file.is_file():
        raise InvalidArgumentError(f"{file}: no such DSL file")
    printed = io.StringIO()
    namespace = _run_file(file, argv or [], printed)
    build = namespace.get("build")
    given = {"world_size": world_size, "ranks_per_node": ranks_per_node, "instances": instances}
    given = {key: value for key, value in given.items() if value is not None}
    if callable(build):
        return _compile_build(build, {**given, **options}, file, f"{file}: build()", printed, verify)
    text, rest = _printed_plan(printed.getvalue())
    if text is None and _has_main_block(file):
        printed = io.StringIO()
        _run_file(file, argv or [], printed, run_name="__main__")
        text, rest = _printed_plan(printed.getvalue())
    _forward(rest)
    if text is None:
        raise DSLError(
            f"{file} neither defines build() nor prints a plan (run as a module, nor from its"
            ' `if __name__ == "__main__":` block): define build(world_size, ...) returning the'
            " CollectiveProgram, or print(JSON()) inside the `with CollectiveProgram(...)` block"
        )
    if options:
        raise InvalidArgumentError(
            f"{file} defines no build(), so options {sorted(options)} cannot be passed to it; use argv"
        )
    document = json.loads(text)
    for key, value in given.items():
        if key == "instances":
            seen = document.get("metadata", {}).get("parameters", {}).get("instances")
        else:
            seen = document.get(key)
        if seen is not None and seen != value:
            raise InvalidArgumentError(
                f"{file} defines no build(), and the plan it printed has {key} {seen}, not {value};"
                " pass the file its own arguments with argv"
            )
    check_schema(document, str(file))
    # The canonical writer emit uses, so that a printed plan and a built one look alike.
    return _verified(emit._canonical_text(document), verify)


def compile_function(build: Callable[..., CollectiveProgram], *, verify: bool = True, **kwargs: Any) -> str:
    """Compile a DSL function into canonical plan JSON text: ``build(**kwargs)`` records a program and
    returns its CollectiveProgram, as the ``build`` of a file for :func:`compile_file` does.

    Arguments ``build`` does not take raise InvalidArgumentError naming them; an error inside it becomes
    a DSLError naming the line of its file. What it prints goes to stderr. ``verify`` runs the plan
    verifier on the result, as for :func:`compile_algorithm`.
    """
    if not callable(build):
        raise InvalidArgumentError(f"expected a DSL function returning a CollectiveProgram, got {type(build).__name__}")
    try:
        source = inspect.getsourcefile(build)
    except TypeError:
        source = None  # a builtin or a C extension: no file to point errors at
    file = Path(source or "<unknown>")
    label = f"{file.name}: {getattr(build, '__qualname__', 'build')}()"
    return _compile_build(build, kwargs, file, label, io.StringIO(), verify)


def _compile_build(
    build: Callable[..., Any], kwargs: dict[str, Any], file: Path, label: str, printed: io.StringIO, verify: bool
) -> str:
    """Call ``build(**kwargs)`` (``label`` names it in errors) and compile the program it returns."""
    try:
        inspect.signature(build).bind(**kwargs)
    except TypeError as error:
        raise InvalidArgumentError(f"{label} cannot take {sorted(kwargs)}: {error}") from None
    except ValueError:
        pass  # no signature to inspect (a builtin): let the call decide
    with contextlib.redirect_stdout(printed):
        program = _guarded(file, lambda: build(**kwargs))
    _forward(printed.getvalue())
    if not isinstance(program, CollectiveProgram):
        raise DSLError(f"{label} must return a CollectiveProgram, got {type(program).__name__}")
    return _verified(emit.emit_plan_text(program), verify)


def _verified(text: str, verify: bool) -> str:
    """``text``, after the plan verifier found nothing wrong with it (when ``verify``)."""
    if verify:
        from loom.verify import DEFAULT_CALLS, check
        from loom.verify.certificate import remember_proof

        # Three calls: the third is the first to reuse the half of an ll plan's double-buffered
        # scratch that the first used, so a peer running two calls ahead shows up.
        check(json.loads(text), calls=DEFAULT_CALLS)
        remember_proof(text)  # proven in this process: running it later (register_plan, loom.Executor) is a lookup
    return text


def _run_file(file: Path, argv: list[str], printed: io.StringIO, run_name: str = "__loom_compile__") -> dict[str, Any]:
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(file), *argv]
    sys.path.insert(0, str(file.resolve().parent))
    try:
        with contextlib.redirect_stdout(printed):
            return _guarded(file, lambda: runpy.run_path(str(file), run_name=run_name))
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _has_main_block(file: Path) -> bool:
    """Whether the file has a top-level ``if __name__ == "__main__":`` block."""
    try:
        tree = ast.parse(file.read_text(), str(file))
    except SyntaxError:
        return False  # it ran, so this does not happen; and then there is no block to run
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1:
            sides = [node.test.left, *node.test.comparators]
            names = {side.id for side in sides if isinstance(side, ast.Name)}
            texts = {side.value for side in sides if isinstance(side, ast.Constant)}
            if isinstance(node.test.ops[0], ast.Eq) and names == {"__name__"} and texts == {"__main__"}:
                return True
    return False


def _guarded(file: Path, body):
    """Run body; a non-Loom exception or exit in the user's code becomes a DSLError naming its line."""
    try:
        return body()
    except LoomError:
        raise
    except SystemExit as error:
        raise InvalidArgumentError(
            f"{file} exited (status {error.code}) while compiling; if it parses command-line arguments,"
            ' pass them with argv=[...] (loom compile FILE.py --argv "...")'
        ) from None
    except Exception as error:
        raise DSLError(f"{type(error).__name__}: {error}", _user_line(file, error)) from error


def _user_line(file: Path, error: BaseException) -> SourceLoc | None:
    target = os.path.abspath(file)
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        if os.path.abspath(frame.filename) == target:
            found = SourceLoc(file.name, frame.lineno or 0)
    return found


def _printed_plan(output: str) -> tuple[str | None, str]:
    """(the last plan printed, everything else printed)."""
    decoder = json.JSONDecoder()
    found: tuple[int, int] | None = None
    position = 0
    while True:
        start = output.find("{", position)
        if start < 0:
            break
        try:
            value, end = decoder.raw_decode(output, start)
        except json.JSONDecodeError:
            position = start + 1
            continue
        if isinstance(value, dict) and "format_version" in value and "gpus" in value:
            found = (start, end)
        position = end
    if found is None:
        return None, output
    start, end = found
    return output[start:end], output[:start] + output[end:]


def _forward(text: str) -> None:
    text = text.strip("\n")
    if text.strip():
        sys.stderr.write(text + "\n")


__all__ = ["build_algorithm", "compile_algorithm", "compile_file", "compile_function", "list_algorithms"]
