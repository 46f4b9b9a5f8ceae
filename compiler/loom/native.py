"""Lazy access to the native extension, with an error that says how to get it."""

from __future__ import annotations

import types

from loom.errors import NativeModuleMissing


def native_module() -> types.ModuleType:
    try:
        from loom import _native
    except ImportError as error:
        raise NativeModuleMissing(
            f"the native module loom._native is not available ({error}); "
            "build it with 'bash scripts/setup.sh' or 'pip install .'"
        ) from error
    return _native
