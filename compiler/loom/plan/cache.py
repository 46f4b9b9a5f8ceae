"""Loom's cache directory: where installed default plans and JIT-compiled plans live.

``LOOM_CACHE_DIR`` always names the cache *root*, never its ``default`` folder; without it (or when it
is empty) the root is ``~/.cache/loom``. Under the root:

- ``default/``: the bundled default plans, ``NAME.json.gz`` with an index, written by ``loom install-plans``
  (or on first use: :mod:`loom.runtime.install_plans`). The C++ plan registry reads
  ``<root>/default/*.json`` and ``*.json.gz`` (executor/src/cache_dir.cc follows the same rule as this module).
- ``jit/``: plans compiled on demand by :func:`loom.compiler.jit.jit_compile`, one file per cache key.

``LOOM_DEFAULT_PLANS=0`` (or false, no, off) turns the bundled plans off: the registry loads none and a
communicator does not install them (:func:`default_plans_enabled`).

Files are written with :func:`write_atomically`, so a reader never sees half a plan.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from loom.errors import InvalidArgumentError


def cache_root() -> Path:
    """``$LOOM_CACHE_DIR`` when set and non-empty, else ``~/.cache/loom``."""
    root = os.environ.get("LOOM_CACHE_DIR", "")
    if root:
        return Path(root)
    return Path.home() / ".cache" / "loom"


def default_plans_dir() -> Path:
    """Where the bundled default plans are installed: ``<root>/default``."""
    return cache_root() / "default"


def default_plans_enabled() -> bool:
    """``LOOM_DEFAULT_PLANS``: 1/0, true/false, yes/no or on/off, any case (unset or empty: on); any
    other value is an InvalidArgumentError, as in the C++ reader (executor/src/cache_dir.cc)."""
    value = os.environ.get("LOOM_DEFAULT_PLANS", "")
    if not value or value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise InvalidArgumentError(f"LOOM_DEFAULT_PLANS: expected 1/0, true/false, yes/no or on/off, got {value!r}")


def jit_dir() -> Path:
    """Where JIT-compiled plans are cached: ``<root>/jit``."""
    return cache_root() / "jit"


def read_regular_file(path: Path) -> str:
    """The text of ``path``, never through a symbolic link (its last part), nor from anything but a regular
    file: a cache folder others can write to must not redirect Loom to files it did not write."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(f"{path}: not a regular file")
        return file.read().decode("utf-8")


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename.

    The temporary file starts with a dot and ends in ``.tmp``, so the plan loader, which reads ``*.json``
    and ``*.json.gz``, never picks it up; ``os.replace`` then swaps the complete file in at once.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    )
    try:
        with handle:
            handle.write(text)
        # NamedTemporaryFile makes the file private (0600); plans in a shared cache must be readable.
        os.chmod(handle.name, 0o644)
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


__all__ = ["cache_root", "default_plans_dir", "jit_dir", "read_regular_file", "write_atomically"]
