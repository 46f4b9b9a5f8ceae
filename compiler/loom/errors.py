"""Exception types shared by the pure-Python compiler and the native runtime.

The native module raises these same classes (it imports this module), so ``except loom.PlanError``
catches a bad plan whether the compiler, the schema check or the C++ decoder found it.
"""

from __future__ import annotations


class LoomError(Exception):
    """Base of every error Loom raises."""


class PlanError(LoomError, ValueError):
    """A plan that does not decode or does not make sense.

    ``path`` is the JSON path of the offending value (``gpus[1].threadblocks[3].ops[7].src.index``,
    or ``$`` for the document itself), ``detail`` says what is wrong and what was expected, and
    ``origin`` names the file the plan came from.
    """

    def __init__(self, detail: str, path: str = "$", origin: str = "") -> None:
        self.detail = detail
        self.path = path
        self.origin = origin
        prefix = f"{origin}: " if origin else ""
        super().__init__(f"{prefix}{path}: {detail}")


class InvalidArgumentError(LoomError, ValueError):
    """A call with an argument Loom cannot use; the message names the argument."""


class LoomTimeoutError(LoomError, TimeoutError):
    """A peer or a device-side wait did not answer in time."""


class TransportError(LoomError):
    """A connection or transfer between ranks failed."""


class CudaError(LoomError):
    """A CUDA call failed."""


class LoomSystemError(LoomError, OSError):
    """An operating-system call failed (file, socket, thread)."""


class NativeModuleMissing(LoomError, ImportError):
    """The native extension loom._native is not built or cannot be loaded."""


class DSLError(LoomError, ValueError):
    """A DSL program that cannot compile; ``loc`` is the user's source line (file:line) when known."""

    def __init__(self, detail: str, loc: object = None) -> None:
        self.detail = detail
        self.loc = loc
        super().__init__(f"{loc}: {detail}" if loc else detail)
