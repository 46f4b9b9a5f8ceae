"""Where ``libloom_nccl.so`` is: the NCCL C API over Loom, to put in front of NCCL with ``LD_PRELOAD``
(docs/nccl.md). ``loom nccl-path`` prints it:

    LD_PRELOAD=$(loom nccl-path) torchrun --nproc-per-node 8 train.py
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from loom.errors import LoomError

LIBRARY_NAME = "libloom_nccl.so"


def _candidates() -> list[Path]:
    folders: list[Path] = []
    # Installed: next to loom._native (a wheel, or an editable install's compiled files).
    spec = importlib.util.find_spec("loom._native")
    if spec is not None and spec.origin:
        folders.append(Path(spec.origin).parent)
    folders.append(Path(__file__).resolve().parents[1])
    # A source tree built with CMake (build/, or LOOM_BUILD_DIR).
    root = Path(__file__).resolve().parents[3]
    folders.append(Path(os.environ.get("LOOM_BUILD_DIR", root / "build")) / "executor" / "nccl")
    return [folder / LIBRARY_NAME for folder in folders]


def nccl_library_path() -> Path:
    """The path of libloom_nccl.so; a LoomError saying how to get it when it was not built."""
    candidates = _candidates()
    for path in candidates:
        if path.is_file():
            return path
    looked = ", ".join(str(path) for path in candidates)
    raise LoomError(
        f"{LIBRARY_NAME} was not built (looked at {looked}): it needs the CUDA toolkit with nccl.h at build time "
        "(nvcc on PATH or in /usr/local/cuda/bin); rebuild with 'bash scripts/setup.sh' or 'pip install .'"
    )
