"""The plan registry and the per-call selector of this process.

    loom.register_plan("my_allreduce.json", tags=["nvlink"], priority=1)
    loom.set_selector(lambda request: request.candidates[0] if request.candidates else None)

Every collective call of a :class:`loom.Communicator` asks the registry for a plan: the selector gets a
request (collective, message bytes, dtype, world size, ranks per node, in place, whether a CUDA graph is
being captured, root, reduction operator, tags, and the registered plans that fit it, best first) and
returns one of them, another ``loom.Plan``, or ``None``. The default selector takes the first candidate:
user plans before bundled ones, then the narrowest size range, then the highest priority, then the
earliest registered.

A selection is cached per request, so a selector runs once per distinct request; registering,
unregistering or setting a selector clears the cache. When no plan is found, the communicator calls the
fallback set with :func:`set_fallback` (for example one that calls NCCL), or raises an error that lists
what is registered. The registry itself lives in C++ (``executor/include/loom/plan_registry.hpp``) and is
thread-safe.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from loom.compiler.jit import JitPlan
from loom.errors import InvalidArgumentError
from loom.native import native_module
from loom.runtime.proven_plans import allow_unproven, mark_proven, require_proven
from loom.verify.certificate import prove

_fallback: Callable[..., Any] | None = None
# The JSON of user plans registered from a file or from loom.compile, by registered name (loom tune writes
# the winners among them into its table; a loom.Plan object carries no text).
_TEXTS: dict[str, str] = {}


def registered_text(name: str) -> str | None:
    """The JSON text of the user plan registered as ``name``, when it was registered from text."""
    return _TEXTS.get(name)


def _as_plan(plan: object) -> tuple[object, str | None]:
    native = native_module()
    if isinstance(plan, native.Plan):
        return plan, None
    if isinstance(plan, JitPlan):  # what loom.compile returns (its text: a cache that refused it has no file)
        return native.Plan.parse(plan.text), plan.text
    if isinstance(plan, (str, os.PathLike)):
        loaded = native.Plan.load(os.fspath(plan))
        path = os.fspath(plan)
        return loaded, (open(path, encoding="utf-8").read() if path.endswith(".json") else None)
    raise InvalidArgumentError(
        f"plan: expected a loom.Plan, a plan file path or what loom.compile returns, got {type(plan).__name__}"
    )


def register_plan(
    plan: object,
    *,
    name: str | None = None,
    min_message_bytes: int | None = None,
    max_message_bytes: int | None = None,
    data_types: Iterable[str] | None = None,
    tags: Iterable[str] = (),
    priority: int = 0,
    replace: bool = False,
    verified: bool = True,
) -> object:
    """Register ``plan`` (a loom.Plan, a plan file path or what ``loom.compile`` returns) as a user plan.

    Returns its ``PlanEntry``.

    Metadata comes from the plan (name, collective, world size, ranks per node, size range, protocol,
    in place, root); it must be proven: this Loom's verifier passes it (a certificate in the cache makes that
    a hash), else a VerificationError names the first finding; ``verified=False`` registers it unproven, with a
    warning once. ``name`` renames it, ``min/max_message_bytes`` narrow its size range, ``data_types``
    restrict it (default: every type), ``tags`` are what requests may ask for, ``priority`` breaks ties
    between equally narrow plans (higher wins). A name already registered is an error unless ``replace``.
    """
    loaded, text = _as_plan(plan)
    text = text or loaded.text
    if verified:
        # Nothing unproven runs: this verifier's certificate for this text, or a verification now.
        prove(text, f"register_plan({loaded.name!r})")
        mark_proven(loaded)
    else:
        allow_unproven(loaded, "registered with verified=False")
    entry = native_module().registry_add(
        loaded,
        name=name,
        min_message_bytes=min_message_bytes,
        max_message_bytes=max_message_bytes,
        data_types=None if data_types is None else list(data_types),
        tags=list(tags),
        priority=priority,
        replace=replace,
    )
    if text is not None:
        _TEXTS[entry.name] = text
    return entry


def unregister_plan(name: str) -> bool:
    """Remove the plan registered as ``name``; False if there was none."""
    return native_module().registry_remove(name)


def list_plans(collective: str | None = None, world_size: int | None = None, source: str | None = None) -> list:
    """Registered plans (``PlanEntry``), in the default selector's order, optionally filtered."""
    return [
        entry
        for entry in native_module().registry_list()
        if (collective is None or entry.collective == collective)
        and (world_size is None or entry.world_size == world_size)
        and (source is None or entry.source == source)
    ]


def set_selector(selector: Callable[[Any], Any] | None) -> None:
    """Use ``selector(request)`` for every selection (``None``: the default selector again)."""
    if selector is not None and not callable(selector):
        raise InvalidArgumentError(f"selector: expected a callable or None, got {type(selector).__name__}")
    native_module().registry_set_selector(None if selector is None else _proving(selector))


def _proving(selector: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``selector``, with a loom.Plan it returns that is not registered proven before it runs (once per plan
    object; a selection is cached per request)."""
    plan_type = native_module().Plan

    def select(request: Any) -> Any:
        chosen = selector(request)
        if isinstance(chosen, plan_type):
            require_proven(chosen, f"the selector's choice {chosen.name!r}")
        return chosen

    return select


def set_fallback(fallback: Callable[..., Any] | None) -> None:
    """What a communicator calls when no plan fits: ``fallback(request, output, input)`` performs the call
    itself (``request`` as a selector sees it). ``None``: raise an error instead (the default)."""
    global _fallback
    if fallback is not None and not callable(fallback):
        raise InvalidArgumentError(f"fallback: expected a callable or None, got {type(fallback).__name__}")
    _fallback = fallback


def fallback() -> Callable[..., Any] | None:
    return _fallback


def select(
    collective: str,
    message_bytes: int,
    dtype: str,
    world_size: int,
    ranks_per_node: int,
    *,
    inplace: bool = False,
    capturing: bool = False,
    root: int | None = None,
    tags: Iterable[str] = (),
    op: str = "sum",
    placement: tuple[int, int] | None = None,
) -> object | None:
    """The plan the selector picks for one call, or None (cached per request). ``op`` is the call's
    reduction operator: a plan that reduces with another one does not fit. ``placement`` is where it runs,
    ``(ranks sharing the GPU, interpreter blocks the GPU holds at once)`` as ``Executor.placement`` gives it:
    a plan whose busiest rank's thread blocks times the first exceed the second does not fit (None: no
    limit)."""
    request = (collective, message_bytes, dtype, world_size, ranks_per_node, inplace, capturing, root, list(tags), op)
    return native_module().registry_select(*request, placement)


def load_default_plans() -> list[str]:
    """Register the bundled plans of ``<cache root>/default`` (once per cache root; an executor does this
    when it is created). Returns the files that could not be loaded, each with its error."""
    return native_module().registry_load_default_plans()


def stats() -> dict:
    """Selections made, answered from the cache, and selector calls."""
    return native_module().registry_stats()
