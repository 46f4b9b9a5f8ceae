"""Registers, stack and SASS instruction count of the executor's kernels (issue 18 asks for them).

Reads the executor library's kernels with `cuobjdump` (`--dump-resource-usage` for registers and
stack, `-sass` for the instructions; `-sass` needs `nvdisasm` beside it or on PATH) and prints one row
per kernel (generic wide, generic narrow, inline), over its data type / operator instances, plus the
fp32 sum instance. Instruction counts are static (what the kernel holds, NOPs left out), not executed.
No GPU needed:

    python bench/kernel_resources.py [OBJECT] [--cuobjdump PATH]

OBJECT defaults to build/executor/libloom_executor.so (every data type's kernels, each compiled from a file of its
own: executor/src/interpreter_kernels.cu.in).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

DEFAULT_OBJECT = Path("build/executor/libloom_executor.so")
# Mangled kernel names: loom::(anonymous)::<kernel><loom::device::ReduceUnits<Type, ReduceKind>>.
KERNEL = re.compile(r"(interpretNarrow|interpretInline|interpret)INS_6device11ReduceUnitsI")
FP32_SUM = re.compile(r"ReduceUnitsIfLNS2_10ReduceKindE0E")
INSTRUCTION = re.compile(r"\s*/\*[0-9a-f]{4,}\*/\s+(\S+)")


def _cuobjdump(requested: str | None) -> str:
    found = requested or shutil.which("cuobjdump")
    if not found:
        cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        found = str(Path(cuda) / "bin" / "cuobjdump")
    if not Path(found).exists():
        sys.exit(f"kernel_resources: no cuobjdump at {found} (pass --cuobjdump PATH)")
    return found


def _run(tool: str, flag: str, obj: Path) -> str:
    env = dict(os.environ)
    env["PATH"] = f"{Path(tool).parent}{os.pathsep}{env.get('PATH', '')}"  # nvdisasm usually sits beside it
    done = subprocess.run([tool, flag, str(obj)], capture_output=True, text=True, env=env)
    if done.returncode != 0 or "fatal" in done.stderr:
        sys.exit(f"kernel_resources: {tool} {flag} failed: {done.stderr.strip()}")
    return done.stdout


def resources(text: str) -> dict[str, tuple[int, int]]:
    """Mangled function name -> (registers, stack bytes)."""
    out: dict[str, tuple[int, int]] = {}
    name = None
    for line in text.splitlines():
        if line.startswith(" Function "):
            name = line.split()[1].rstrip(":")
        elif name and "REG:" in line:
            fields = dict(item.split(":", 1) for item in line.split() if ":" in item)
            out[name] = (int(fields["REG"]), int(fields["STACK"]))
            name = None
    return out


def instructions(text: str) -> dict[str, int]:
    """Mangled function name -> SASS instructions other than NOP."""
    out: dict[str, int] = {}
    name = None
    for line in text.splitlines():
        if "Function : " in line:
            name = line.split("Function : ", 1)[1].strip()
            out[name] = 0
        elif name:
            match = INSTRUCTION.match(line)
            if match and match.group(1) != "NOP":
                out[name] += 1
    return out


def table(usage: dict[str, tuple[int, int]], counts: dict[str, int]) -> list[str]:
    per_kernel: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    fp32_sum: dict[str, tuple[int, int, int]] = {}
    for name, (registers, stack) in usage.items():
        match = KERNEL.search(name)
        if not match or name not in counts:
            continue
        row = (registers, stack, counts[name])
        per_kernel[match.group(1)].append(row)
        if FP32_SUM.search(name):
            fp32_sum[match.group(1)] = row

    def span(values: list[int]) -> str:
        return f"{min(values)}" if min(values) == max(values) else f"{min(values)}–{max(values)}"

    lines = [
        "| kernel | instances | registers | stack (B) | SASS instructions "
        "| fp32 sum: registers / stack / instructions |",
        "|---|---|---|---|---|---|",
    ]
    for kernel in ("interpret", "interpretNarrow", "interpretInline"):
        rows = per_kernel.get(kernel)
        if not rows:
            continue
        columns = [span([row[i] for row in rows]) for i in range(3)]
        sum_row = " / ".join(str(v) for v in fp32_sum.get(kernel, ()))
        lines.append(f"| `{kernel}` | {len(rows)} | {' | '.join(columns)} | {sum_row} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("object", nargs="?", type=Path, default=DEFAULT_OBJECT)
    parser.add_argument("--cuobjdump", help="the cuobjdump to use (default: PATH, then CUDA_HOME/bin)")
    args = parser.parse_args()
    if not args.object.exists():
        sys.exit(f"kernel_resources: no object at {args.object} (build first, or pass its path)")
    tool = _cuobjdump(args.cuobjdump)
    print(
        "\n".join(
            table(
                resources(_run(tool, "--dump-resource-usage", args.object)),
                instructions(_run(tool, "-sass", args.object)),
            )
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
