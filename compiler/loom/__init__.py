"""Loom: write collective algorithms in a Python DSL, compile them to JSON plans, run them on GPUs.

The compiler side of the package is pure Python. The runtime and executor live in the native
extension ``loom._native``, which is imported only when one of its names is used (``loom.Plan``).
``loom.verify`` (the plan verifier; ``loom.verify(plan)`` lists what is wrong with a plan) is
imported on first use too, as are ``loom.Communicator`` (collective calls that select a plan per call),
the registry's functions (``register_plan``, ``set_selector``, ...; see ``loom.registry``, the module
``loom.runtime.registry``) and ``loom.compile(algorithm, spec)`` (compile once, then read the plan back
from ``<cache root>/jit``; see ``loom.compiler.jit``).

The package is grouped by layer, each importing only the ones before it: ``errors``, ``version`` and
``native`` at the top; ``plan`` (plan files: canonical text, schema, validation, cache); ``language`` (the
DSL); ``ir``, ``passes``, ``assembly`` and ``compiler.emit`` (the compiler); ``verify``; ``algorithms``,
``interop`` and the rest of ``compiler`` (the library and its compile entry points); ``runtime`` and
``launch`` (the runtime API); ``tools`` (the ``loom`` command, the demo).
"""

from loom.errors import (
    CudaError,
    DSLError,
    InvalidArgumentError,
    LoomError,
    LoomSystemError,
    LoomTimeoutError,
    NativeModuleMissing,
    PlanError,
    TransportError,
)
from loom.version import __version__

__all__ = [
    "Communicator",
    "CudaError",
    "DSLError",
    "Executor",
    "InvalidArgumentError",
    "LoomError",
    "LoomSystemError",
    "LoomTimeoutError",
    "NativeModuleMissing",
    "Plan",
    "PlanError",
    "TransportError",
    "__version__",
    "compile",
    "list_plans",
    "register_plan",
    "set_fallback",
    "set_selector",
    "unregister_plan",
    "verify",
]

_NATIVE_NAMES = {"Plan"}
# The registry's functions (loom.runtime.registry), loaded on first use: they need the native module.
_REGISTRY_NAMES = {"list_plans", "register_plan", "set_fallback", "set_selector", "unregister_plan"}


def __getattr__(name: str):
    if name == "Executor":
        from loom.runtime.executor import Executor

        return Executor
    if name == "compile":
        from loom.compiler.jit import jit_compile

        return jit_compile
    if name == "Communicator":
        from loom.runtime.communicator import Communicator

        return Communicator
    if name in _REGISTRY_NAMES:
        from loom.runtime import registry

        return getattr(registry, name)
    # Submodules loaded on first use, to keep `import loom` cheap; loom.registry is the runtime's registry.
    if name == "verify":
        import importlib

        return importlib.import_module("loom.verify")
    if name == "registry":
        from loom.runtime import registry

        return registry
    if name in _NATIVE_NAMES:
        from loom.native import native_module

        return getattr(native_module(), name)
    raise AttributeError(f"module 'loom' has no attribute {name!r}")
