"""Install the bundled default plans into the cache, where the executor's plan registry loads them.

The plans are generated into plans/default/*.json of the source tree (plans/build_default_plans.py);
a wheel carries them as loom/default_plans/*.json (an install rule in CMakeLists.txt). The installer
copies them into ``<cache root>/default`` (:func:`loom.plan.cache.default_plans_dir`), one file at a time
through a temporary file and a rename, and removes plans a previous version installed that are no
longer bundled. Running it again changes nothing.

A wheel cannot run code when it is installed, so :func:`ensure_default_plans_installed` (called when a
``loom.Communicator`` is created) installs them on first use: when ``<cache root>/default`` lacks the
stamp of this package's plans (``.installed``: the loom version and every bundled plan's name and size),
it installs them and writes the stamp. After an upgrade the stamp differs, so the new plans replace the
old ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

from loom.errors import LoomError
from loom.plan.cache import default_plans_dir, default_plans_enabled, write_atomically
from loom.version import __version__

STAMP_NAME = ".installed"

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the loom package


def bundled_plans_dir() -> Path:
    """The bundled plans: inside the installed package, or in plans/default of a source checkout.

    An editable install imports the package from the checkout, so it reads the checkout's plans, which
    are the ones `python plans/build_default_plans.py` keeps current.
    """
    for candidate in (_PACKAGE_DIR / "default_plans", _PACKAGE_DIR.parents[1] / "plans" / "default"):
        if any(candidate.glob("*.json")):
            return candidate
    raise LoomError(
        "the bundled default plans are neither in the loom package (loom/default_plans) nor in a source"
        " checkout (plans/default); in a checkout, run python plans/build_default_plans.py"
    )


def bundled_plans() -> list[Path]:
    """Every bundled plan file, sorted by name."""
    return sorted(bundled_plans_dir().glob("*.json"))


def install_default_plans(target: Path | None = None, *, force: bool = False) -> list[Path]:
    """Copy the bundled plans into ``target``; return the installed plan files, sorted.

    ``target`` is the folder that receives the ``*.json`` files, ``<cache root>/default`` by default
    (``default_plans_dir()``); to install under another cache root, pass ``root / "default"``. A file
    that already has the bundled content is left alone (so a process loading the folder meanwhile sees
    no change) unless ``force``; ``*.json`` files in ``target`` that are not bundled are removed.
    """
    target = default_plans_dir() if target is None else Path(target)
    sources = bundled_plans()
    target.mkdir(parents=True, exist_ok=True)
    installed = []
    for source in sources:
        destination = target / source.name
        text = source.read_text(encoding="utf-8")
        if force or not _has_text(destination, text):
            write_atomically(destination, text)
        installed.append(destination)
    bundled_names = {source.name for source in sources}
    for stale in target.glob("*.json"):
        if stale.name not in bundled_names:
            stale.unlink(missing_ok=True)  # another rank of this host may have removed it already
    return installed


def ensure_default_plans_installed() -> bool:
    """Install the bundled plans into ``<cache root>/default`` unless this version's are there already.

    Returns True when it installed them. Nothing happens with ``LOOM_DEFAULT_PLANS=0``. A cache that
    cannot be written is reported on stderr and left alone (the job then runs with the plans it finds,
    or the user's own).
    """
    if not default_plans_enabled():
        return False
    target = default_plans_dir()
    try:
        stamp = _stamp()
        if _has_text(target / STAMP_NAME, stamp):
            return False
        install_default_plans(target)
        write_atomically(target / STAMP_NAME, stamp)
        return True
    except (OSError, LoomError) as error:
        print(f"loom: cannot install the bundled default plans into {target}: {error}", file=sys.stderr)
        return False


def _stamp() -> str:
    lines = [f"loom {__version__}"] + [f"{path.name} {path.stat().st_size}" for path in bundled_plans()]
    return "\n".join(lines) + "\n"


def _has_text(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


__all__ = ["bundled_plans", "bundled_plans_dir", "ensure_default_plans_installed", "install_default_plans"]
