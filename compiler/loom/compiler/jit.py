"""Compile a plan on demand, once: the result is cached in ``<cache root>/jit/<key>.json``.

    plan = jit_compile("allreduce_allpairs_packet", {"world_size": 4, "inplace": True})
    plan.path, plan.name, plan.from_cache   # from_cache is True from the second call on

``algorithm`` is one of:

- a library algorithm name (``loom compile --list``); ``spec`` takes the keyword arguments of
  :func:`loom.compiler.driver.compile_algorithm` (``world_size``, required, ``ranks_per_node``, ``instances``,
  ``inplace``, ``plan_name``, ``min_message_size``, ``max_message_size``, ``num_threads_per_block``)
  and the algorithm's own options (``iterations``, ``root``);
- a DSL function: a ``build`` that records a program and returns its CollectiveProgram
  (docs/dsl.md); it is called with ``spec`` as keyword arguments;
- the path of a DSL file, as ``loom compile FILE.py`` takes; ``spec`` takes the keyword arguments of
  :func:`loom.compiler.driver.compile_file` (``world_size``, ``ranks_per_node``, ``instances``, ``argv``,
  and options for its ``build``).

The cache key is a sha256 over the loom version, the source of the whole loom package (so an
algorithm, pass or emitter that changed never reuses a stale plan), the DSL source (for a function the
text of its file and its name, for a file its text and name), and ``spec`` as canonical JSON. Files a
user's program imports are not in the key: after changing one, change the spec or clear the cache. A
function's file is read when it is compiled, so reload a module edited since it was imported (the
plan's own ``source_hash`` reads the file the same way). A cached file that does not read back as a
plan (damaged, truncated) is compiled again and replaced.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loom.algorithms import get
from loom.compiler.driver import compile_algorithm, compile_file, compile_function
from loom.errors import InvalidArgumentError, PlanError
from loom.plan.cache import jit_dir, read_regular_file, write_atomically
from loom.plan.schema import check_schema
from loom.verify.certificate import record_proof
from loom.version import __version__

# What a spec may hold for a library algorithm, besides the algorithm's own options.
LIBRARY_SPEC_KEYS = (
    "world_size",
    "ranks_per_node",
    "instances",
    "inplace",
    "plan_name",
    "min_message_size",
    "max_message_size",
    "num_threads_per_block",
)

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the loom package


@dataclass(frozen=True)
class JitPlan:
    """A plan from :func:`jit_compile`: its cache file, its JSON text and name, and where it came from."""

    path: Path
    text: str
    name: str
    key: str
    from_cache: bool  # True: read back from the cache; False: compiled by this call


def jit_compile(
    algorithm: str | os.PathLike[str] | Callable[..., Any],
    spec: Mapping[str, Any] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> JitPlan:
    """Compile ``algorithm`` with ``spec`` (see the module docstring), or read the plan back from the cache.

    ``cache_dir`` is the folder of the cached plans (default :func:`loom.plan.cache.jit_dir`,
    ``<cache root>/jit``). Bad arguments raise InvalidArgumentError; a program that does not compile
    or verify raises as :mod:`loom.compiler.driver` does, and nothing is cached.
    """
    spec = _checked_spec(algorithm, spec)
    key = cache_key(algorithm, spec)
    path = (jit_dir() if cache_dir is None else Path(cache_dir)) / f"{key}.json"
    # Certificates with the plans of a cache folder the caller names, else in <cache root>/verified.
    store = None if cache_dir is None else Path(cache_dir) / ".verified"
    cached = _read_plan(path)
    if cached is not None:
        text, name = cached
        if _proven_or_dropped(text, path, store):
            return JitPlan(path, text, name, key, from_cache=True)
    text = _compile(algorithm, spec)
    if spec.get("verify", True):
        record_proof(text, store)  # the compile verified it
    try:
        write_atomically(path, text)
    except OSError as error:
        # A cache that cannot be written (read-only, full, not ours) costs a compile per process, not the job.
        _warn_once(f"loom: the JIT keeps its plans in memory: cannot write {path.parent}: {error}")
        _IN_MEMORY[path] = text
    return JitPlan(path, text, json.loads(text)["name"], key, from_cache=False)


# Plans compiled by this process that its cache folder would not take, by the path they were meant for.
_IN_MEMORY: dict[Path, str] = {}
_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        print(message, file=sys.stderr, flush=True)


def cache_key(algorithm: str | os.PathLike[str] | Callable[..., Any], spec: Mapping[str, Any] | None = None) -> str:
    """The sha256 (hex) under which :func:`jit_compile` caches ``algorithm`` compiled with ``spec``."""
    digest = hashlib.sha256()
    parts = (f"loom {__version__}", _loom_source_digest(), _source_identity(algorithm), _canonical_json(spec or {}))
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")  # so that no two different part lists hash the same bytes
    return digest.hexdigest()


def _checked_spec(algorithm: object, spec: Mapping[str, Any] | None) -> dict[str, Any]:
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise InvalidArgumentError(f"spec must be a dict of compile parameters, got {type(spec).__name__}")
    for key in spec:
        if not isinstance(key, str):
            raise InvalidArgumentError(f"spec keys must be strings, got {key!r}")
    if isinstance(algorithm, str) and not _is_file_path(algorithm):
        allowed = set(LIBRARY_SPEC_KEYS) | set(get(algorithm).options)
        unknown = sorted(set(spec) - allowed)
        if unknown:
            raise InvalidArgumentError(
                f"{algorithm}: unknown spec key {unknown[0]!r}; it takes {', '.join(sorted(allowed))}"
            )
        if "world_size" not in spec:
            raise InvalidArgumentError(f"{algorithm}: the spec must give world_size")
    # Function and file specs are checked against the build() they are passed to, when compiling.
    return dict(spec)


def _compile(algorithm: str | os.PathLike[str] | Callable[..., Any], spec: dict[str, Any]) -> str:
    if callable(algorithm):
        return compile_function(algorithm, **spec)
    if _is_file_path(algorithm):
        return compile_file(algorithm, **spec)
    return compile_algorithm(algorithm, **spec)


def _proven_or_dropped(text: str, path: Path, store: Path | None) -> bool:
    """Whether a cached plan is proven (its certificate, or the verifier now); a refuted one is compiled anew,
    which writes a good one over it, and said once: something put a plan the verifier refutes in the cache."""
    from loom.verify.certificate import prove
    from loom.verify.report import VerificationError

    try:
        prove(text, str(path), store)
    except (VerificationError, PlanError) as error:
        _warn_once(f"loom: warning: compiling anew, the cached plan is refuted: {str(error).splitlines()[0]}")
        return False
    return True


def _read_plan(path: Path) -> tuple[str, str] | None:
    """(text, plan name) of a cached plan, or None when it is missing or does not read back as a plan."""
    if path in _IN_MEMORY:
        text = _IN_MEMORY[path]
        return text, json.loads(text)["name"]
    try:
        text = read_regular_file(path)
        document = json.loads(text)
        check_schema(document, str(path))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, PlanError):
        return None
    return text, document["name"]


def _is_file_path(algorithm: object) -> bool:
    return isinstance(algorithm, os.PathLike) or (isinstance(algorithm, str) and algorithm.endswith(".py"))


def _source_identity(algorithm: object) -> str:
    """The text that stands for ``algorithm``'s DSL source in the key."""
    if callable(algorithm):
        return _function_identity(algorithm)
    if _is_file_path(algorithm):
        file = Path(algorithm)
        if not file.is_file():
            raise InvalidArgumentError(f"{file}: no such DSL file")
        # The file's name is in the plan (every op's loc), so it is in the key too.
        return f"file {file.name}\n{file.read_text(encoding='utf-8')}"
    if isinstance(algorithm, str):
        get(algorithm)  # an unknown name raises, listing the library's names
        return f"library {algorithm}"  # its source is part of _loom_source_digest()
    raise InvalidArgumentError(
        "algorithm must be a library algorithm name, a DSL function or the path of a DSL .py file,"
        f" got {type(algorithm).__name__}"
    )


def _function_identity(function: Callable[..., Any]) -> str:
    name = getattr(function, "__qualname__", type(function).__name__)
    try:
        file = inspect.getsourcefile(function)
    except TypeError:
        file = None
    if file is not None and os.path.isfile(file):
        # The whole file, so that helpers the function calls from its own module are in the key.
        return f"function {os.path.basename(file)}:{name}\n{Path(file).read_text(encoding='utf-8')}"
    try:
        return f"function {name}\n{inspect.getsource(function)}"
    except (OSError, TypeError):
        raise InvalidArgumentError(
            f"cannot read the source of {name} to key the cache; define the DSL function in a file"
        ) from None


@functools.cache
def _loom_source_digest() -> str:
    """sha256 over every .py file of the loom package: the compiler's own version, finer than __version__."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE_DIR.rglob("*.py")):
        digest.update(path.relative_to(_PACKAGE_DIR).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _canonical_json(spec: Mapping[str, Any]) -> str:
    try:
        return json.dumps(spec, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        for key, value in spec.items():
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    f"spec key {key!r}: {value!r} is not JSON data (numbers, strings, booleans, lists, dicts)"
                ) from None
        raise


__all__ = ["LIBRARY_SPEC_KEYS", "JitPlan", "cache_key", "jit_compile"]
