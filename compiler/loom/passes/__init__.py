"""The compiler pipeline: each pass is a module with ``run(plan) -> plan`` (docs/compiler.md).

Order (DESIGN.md): checks on the recorded program, thread-block-group lowering, dependency
analysis, instance replication, fusion, resource assignment. Emitting is loom.emit.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from loom.ir import model as ir
from loom.passes import checks, dependencies, instances, lower_tb_groups, resources

if TYPE_CHECKING:
    from loom.language.program import CollectiveProgram

# Fusion passes in the order they run; each merges adjacent ops of one thread block.
FUSION_PASSES: list = []


def fuse(plan: ir.Plan) -> ir.Plan:
    for fusion in FUSION_PASSES:
        plan = fusion.run(plan)
    return plan


def compile_program(program: CollectiveProgram) -> ir.Plan:
    plan = copy.deepcopy(program.plan)
    checks.check_output_written(plan, program.collective)
    checks.check_signal_wait_pairs(plan)
    plan = lower_tb_groups.run(plan)
    if program.auto_sync:
        plan = dependencies.run(plan)
    plan = instances.run(plan, program.instances)
    if program.instr_fusion:
        plan = fuse(plan)
    return resources.run(plan)
