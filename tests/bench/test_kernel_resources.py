"""bench/kernel_resources.py: the table it makes from cuobjdump's output (pure Python; the tool itself
runs on a build with cuobjdump, and its numbers are in docs/executor.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("kernel_resources", ROOT / "bench" / "kernel_resources.py")
kernel_resources = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel_resources)

# Two instances of the wide generic kernel (fp32 sum, half max) and one inline kernel, as cuobjdump
# names them; a helper function that is no kernel of the table.
WIDE_SUM = "_ZN4loom47_GLOBAL__N__x9interpretINS_6device11ReduceUnitsIfLNS2_10ReduceKindE0EEEEEvNS2_7ProgramE"
WIDE_MAX = "_ZN4loom47_GLOBAL__N__x9interpretINS_6device11ReduceUnitsI6__halfLNS2_10ReduceKindE2EEEEEvNS2_7ProgramE"
INLINE_SUM = "_ZN4loom47_GLOBAL__N__x15interpretInlineINS_6device11ReduceUnitsIfLNS2_10ReduceKindE0EEEEEvNS2_7ProgramE"
HELPER = "_ZN4loom6helperEv"

USAGE = f"""
Resource usage:
 Common:
  GLOBAL:0
 Function {WIDE_SUM}:
  REG:64 STACK:1232 SHARED:0 LOCAL:0 CONSTANT[0]:920 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function {WIDE_MAX}:
  REG:64 STACK:1264 SHARED:0 LOCAL:0 CONSTANT[0]:920 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function {INLINE_SUM}:
  REG:126 STACK:200 SHARED:0 LOCAL:0 CONSTANT[0]:920 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function {HELPER}:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:0 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def _sass(name: str, opcodes: list[str]) -> str:
    lines = [f"\t\tFunction : {name}", '\t.headerflags\t@"EF_CUDA_SM90"']
    for index, opcode in enumerate(opcodes):
        lines.append(
            f"        /*{index * 16:04x}*/                   {opcode} R1, c[0x0][0x28] ;   /* 0x00000a0000017a02 */"
        )
        lines.append("                                                                 /* 0x000fe40000000f00 */")
    return "\n".join(lines) + "\n"


SASS = (
    _sass(WIDE_SUM, ["MOV", "S2R", "NOP", "EXIT"]) + _sass(WIDE_MAX, ["MOV", "EXIT"]) + _sass(INLINE_SUM, ["MOV"] * 5)
)


def test_resources_and_instructions_are_read_per_function():
    assert kernel_resources.resources(USAGE)[WIDE_MAX] == (64, 1264)
    counts = kernel_resources.instructions(SASS)
    assert counts == {WIDE_SUM: 3, WIDE_MAX: 2, INLINE_SUM: 5}  # NOPs and encoding lines left out


def test_the_table_spans_instances_and_names_the_fp32_sum_one():
    lines = kernel_resources.table(kernel_resources.resources(USAGE), kernel_resources.instructions(SASS))
    assert lines[2] == "| `interpret` | 2 | 64 | 1232–1264 | 2–3 | 64 / 1232 / 3 |"
    assert lines[3] == "| `interpretInline` | 1 | 126 | 200 | 5 | 126 / 200 / 5 |"
    assert len(lines) == 4  # no narrow kernel in the sample, and the helper is no row
