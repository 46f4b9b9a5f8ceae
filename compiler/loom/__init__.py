"""Loom: write collective algorithms in a Python DSL, compile them to JSON plans, run them on GPUs.

The compiler side of the package is pure Python. The runtime and executor live in the native
extension ``loom._native``, which is imported only when one of its names is used (``loom.Plan``).
``loom.verify`` (the plan verifier; ``loom.verify(plan)`` lists what is wrong with a plan) is
imported on first use too.
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
    "verify",
]

_NATIVE_NAMES = {"Plan"}


def __getattr__(name: str):
    if name == "Executor":
        from loom.executor import Executor

        return Executor
    if name == "verify":  # the plan verifier (loom.verify), loaded on first use to keep `import loom` cheap
        import importlib

        return importlib.import_module("loom.verify")
    if name in _NATIVE_NAMES:
        from loom.native import native_module

        return getattr(native_module(), name)
    raise AttributeError(f"module 'loom' has no attribute {name!r}")
