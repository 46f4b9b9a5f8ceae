"""The compiler pipeline: each pass is a module with ``run(plan) -> plan`` (docs/compiler.md).

Order (DESIGN.md): checks on the recorded program, thread-block-group lowering, dependency
analysis, instance replication, fusion, resource assignment. Emitting is loom.compiler.emit.
"""

from __future__ import annotations

import copy

from loom.ir import model as ir
from loom.passes import (
    checks,
    dependencies,
    fuse_dead_store,
    fuse_multi_channel,
    fuse_multi_dst,
    fuse_multimem,
    fuse_paired_sends,
    fuse_put_signal,
    fuse_read_reduce_send,
    fuse_reduce_chain,
    fuse_reduce_copy_packet,
    fuse_reduce_send,
    fuse_reduce_send_packet,
    instances,
    lower_tb_groups,
    resources,
)
from loom.passes.recorded_program import RecordedProgram

# Fusion passes in the order they run; each merges adjacent ops of one thread block.
FUSION_PASSES: list = [
    fuse_dead_store,  # first: the other rules then see only the ops whose results are used
    fuse_multi_dst,  # before the send fusions, so that a result sent to several peers goes in one op
    fuse_reduce_chain,  # before the send fusions, so that one send follows the whole reduction
    fuse_reduce_copy_packet,
    fuse_reduce_send_packet,
    fuse_reduce_send,
    fuse_read_reduce_send,
    fuse_multimem,
    fuse_put_signal,  # before fuse_multi_channel, which would otherwise take the signal into a multi-channel one
    fuse_paired_sends,  # after the rules that take a put of one source
    fuse_multi_channel,
]


def fuse(plan: ir.Plan) -> ir.Plan:
    for fusion in FUSION_PASSES:
        plan = fusion.run(plan)
    return plan


def compile_program(program: RecordedProgram) -> ir.Plan:
    plan = copy.deepcopy(program.plan)
    checks.check_output_written(plan, program.collective)
    checks.check_signal_wait_pairs(plan)
    plan = lower_tb_groups.run(plan)
    if program.auto_sync:
        plan = dependencies.run(plan)
    plan = instances.run(plan, program.instances)
    if program.instr_fusion:
        plan = fuse(plan)
    plan = resources.run(plan)
    checks.check_waits_in_one_thread_block(plan)
    return plan
