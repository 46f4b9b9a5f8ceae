"""Install the bundled default plans into the cache, where the executor's plan registry loads them.

The plans are generated into plans/default/*.json of the source tree (plans/build_default_plans.py);
a wheel carries them gzip-compressed as loom/default_plans/*.json.gz (an install rule in CMakeLists.txt).
The installer puts each one into ``<cache root>/default`` (:func:`loom.plan.cache.default_plans_dir`) as
``NAME.json.gz``, beside ``.index`` (what the registry selects each plan by, so that a process decodes a
plan only when it first runs it) and the stamp ``.installed`` (the Loom version, the layout, and every
bundled plan's name and size). Every file is written through a temporary file and a rename; plans a
previous version installed (its ``.manifest``) that are no longer bundled are removed, and nothing else:
files the installer did not write are left alone and named in a warning. Running it again changes nothing.

The installer itself is C++ (``executor/src/default_plans_install.cc``), shared with libloom_nccl.so,
which installs the plans the same way when an application that only preloads it initialises NCCL: each
accepts the other's install. This module finds the bundled plans of the package and calls it.

A wheel cannot run code when it is installed, so :func:`ensure_default_plans_installed` (called when a
``loom.Communicator`` is created) installs them on first use: when ``<cache root>/default`` lacks the
stamp of this package's plans, it installs them. After an upgrade the stamp differs, so the new plans
replace the old ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

from loom.errors import LoomError
from loom.native import native_module
from loom.plan.cache import default_plans_dir, default_plans_enabled

STAMP_NAME = ".installed"  # kInstalledStampName of loom/default_plans.hpp
INDEX_NAME = ".index"  # kPlanIndexName of executor/src/plan_index.hpp

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the loom package
_PLAN_PATTERNS = ("*.json", "*.json.gz")


def bundled_plans_dir() -> Path:
    """The bundled plans: inside the installed package, or in plans/default of a source checkout.

    An editable install imports the package from the checkout, so it reads the checkout's plans, which
    are the ones `python plans/build_default_plans.py` keeps current.
    """
    for candidate in (_PACKAGE_DIR / "default_plans", _PACKAGE_DIR.parents[1] / "plans" / "default"):
        if any(any(candidate.glob(pattern)) for pattern in _PLAN_PATTERNS):
            return candidate
    raise LoomError(
        "the bundled default plans are neither in the loom package (loom/default_plans) nor in a source"
        " checkout (plans/default); in a checkout, run python plans/build_default_plans.py"
    )


def bundled_plans() -> list[Path]:
    """Every bundled plan file (``*.json`` in a checkout, ``*.json.gz`` in a wheel), sorted by name."""
    folder = bundled_plans_dir()
    return sorted(path for pattern in _PLAN_PATTERNS for path in folder.glob(pattern))


def installed_name(bundled: Path) -> str:
    """The name a bundled plan file has once installed: ``NAME.json.gz``."""
    return bundled.name if bundled.name.endswith(".gz") else bundled.name + ".gz"


def install_default_plans(target: Path | None = None, *, force: bool = False) -> list[Path]:
    """Install the bundled plans into ``target``; return the installed plan files, sorted.

    ``target`` is the folder that receives the ``*.json.gz`` files, ``<cache root>/default`` by default
    (``default_plans_dir()``); to install under another cache root, pass ``root / "default"``. A file
    that already holds its plan is left alone (so a process loading the folder meanwhile sees no change)
    unless ``force``; of the other files in ``target`` only plans an earlier install wrote are removed (the
    user's are left alone and named on stderr). The manifest, the index and the stamp are written last.
    """
    target = default_plans_dir() if target is None else Path(target)
    bundled = bundled_plans_dir()
    return [Path(path) for path in native_module().install_default_plans(str(bundled), str(target), force)]


def ensure_default_plans_installed() -> bool:
    """Install the bundled plans into ``<cache root>/default`` unless this version's are there already.

    Returns True when it installed them. Nothing happens with ``LOOM_DEFAULT_PLANS=0``. A cache that
    cannot be written is reported on stderr and left alone (the job then runs with the plans it finds,
    or the user's own). Processes of one host that call it at once install the plans once.
    """
    if not default_plans_enabled():
        return False
    target = default_plans_dir()
    try:
        return native_module().ensure_default_plans_installed(str(bundled_plans_dir()), str(target))
    except (OSError, LoomError) as error:
        print(f"loom: cannot install the bundled default plans into {target}: {error}", file=sys.stderr)
        return False


__all__ = [
    "INDEX_NAME",
    "STAMP_NAME",
    "bundled_plans",
    "bundled_plans_dir",
    "ensure_default_plans_installed",
    "install_default_plans",
    "installed_name",
]
