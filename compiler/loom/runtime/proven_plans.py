"""Nothing unproven reaches the executor, whichever way a plan comes to it: the plan objects of this process that
are proven (or that their caller chose to run unproven), and the check a plan passes the first time it is
handed to ``loom.Executor`` or chosen by a custom selector.

Registered plans are proven when registered (``register_plan``), bundled ones when built (the installer's
index holds their hashes, the registry refuses changed files), JIT plans when compiled; a plan object that
is none of these (``loom.Plan.load``, ``loom.Plan.parse``, a plan file path given to ``Executor.execute``)
is proven here: by its certificate (a hash) or by the verifier, once per plan object.
"""

from __future__ import annotations

import weakref

from loom.native import native_module
from loom.verify.certificate import prove, warn_unproven

_PROVEN: weakref.WeakSet = weakref.WeakSet()


def mark_proven(plan: object) -> None:
    """``plan`` (a loom.Plan) was proven, or registered unproven on purpose: it may run."""
    _PROVEN.add(plan)


def require_proven(plan: object, origin: str) -> None:
    """Return when ``plan`` may run; else prove it now (VerificationError naming ``origin`` and the verifier's
    first finding when it fails)."""
    if plan in _PROVEN:
        return
    entry = native_module().registry_find(plan.name)
    if entry is None or entry.plan is not plan:  # the registry's own plan object passed its check at registration
        prove(plan.text, origin)
    _PROVEN.add(plan)


def allow_unproven(plan: object, how: str) -> None:
    """The caller runs ``plan`` without proof (``how``: which ``verified=False``): warn once per plan name."""
    if plan not in _PROVEN:
        warn_unproven(plan.name, how)
        _PROVEN.add(plan)


__all__ = ["allow_unproven", "mark_proven", "require_proven"]
