"""Conversions between Loom plans and other collective libraries' plan formats.

``import_mscclpp_plan`` turns an MSCCL++ JSON execution plan into a Loom plan (docs/import.md).
"""

from __future__ import annotations

from loom.interop.mscclpp_plan import convert_mscclpp_plan, import_mscclpp_file, import_mscclpp_plan

__all__ = ["convert_mscclpp_plan", "import_mscclpp_file", "import_mscclpp_plan"]
