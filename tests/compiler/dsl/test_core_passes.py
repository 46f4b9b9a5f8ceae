"""The passes the DSL always runs: thread-block-group lowering, dependency analysis, instances,
resource assignment. Each test records a small program and checks the ops the pass produced."""

from __future__ import annotations

import copy

from loom.ir import model as ir
from loom.language import (
    AllGather,
    AllReduce,
    Buffer,
    CollectiveProgram,
    LoopIterationContext,
    MemoryChannel,
    Rank,
    ReduceScatter,
    Semaphore,
    ThreadBlockGroup,
)
from loom.passes import dependencies, lower_tb_groups, resources


def _ops(plan: ir.Plan, rank: int, tb: int) -> list[str]:
    block = next(t for t in plan.gpu(rank).threadblocks if t.id == tb)
    return [op.op for op in block.ops]


def _program(**kwargs) -> CollectiveProgram:
    return CollectiveProgram("t", AllReduce(2, 1, False), 2, instr_fusion=False, **kwargs)


def _passes(program: CollectiveProgram) -> ir.Plan:
    """The recorded program through lowering and dependency analysis only (no output check)."""
    plan = lower_tb_groups.run(copy.deepcopy(program.plan))
    return dependencies.run(plan) if program.auto_sync else plan


def test_cross_thread_block_read_after_write_gets_one_semaphore() -> None:
    with _program() as program:
        rank = Rank(0)
        out, inp = rank.get_output_buffer(), rank.get_input_buffer()
        rank.copy(out[0:1], inp[0:1], tb=0)
        rank.copy(out[1:2], out[0:1], tb=1)  # reads what tb 0 wrote
        rank.copy(inp[1:2], out[0:1], tb=1)  # already ordered: no second semaphore
        plan = _passes(program)
    assert _ops(plan, 0, 0) == ["copy", "sem_release"]
    assert _ops(plan, 0, 1) == ["sem_acquire", "copy", "copy"]
    release = plan.gpu(0).threadblocks[0].ops[1]
    acquire = plan.gpu(0).threadblocks[1].ops[0]
    assert release.semaphores == acquire.semaphores and release.auto and acquire.auto
    assert len(plan.gpu(0).semaphores) == 1


def test_same_thread_block_dependency_gets_a_nop_only_when_needed() -> None:
    with _program() as program:
        rank = Rank(0)
        out, inp = rank.get_output_buffer(), rank.get_input_buffer()
        rank.copy(out[0:1], inp[0:1], tb=0)
        rank.copy(out[1:2], inp[1:2], tb=0)  # independent: no nop
        rank.copy(inp[1:2], out[0:1], tb=0)  # reads chunk 0 of the output: nop
        rank.copy(inp[0:1], out[1:2], tb=0)  # the nop above already ordered it
        plan = _passes(program)
    assert _ops(plan, 0, 0) == ["copy", "copy", "nop", "copy", "copy"]


def test_an_op_right_after_an_inserted_sync_still_orders_its_own_writes() -> None:
    with _program() as program:
        rank = Rank(0)
        out, inp = rank.get_output_buffer(), rank.get_input_buffer()
        rank.copy(out[0:1], inp[0:1], tb=0)
        rank.copy(out[1:2], out[0:1], tb=0)  # nop before: reads chunk 0
        rank.copy(inp[1:2], out[1:2], tb=0)  # nop before: reads what the op above wrote
        plan = _passes(program)
    assert _ops(plan, 0, 0) == ["copy", "nop", "copy", "nop", "copy"]


def test_write_after_read_across_thread_blocks() -> None:
    with _program() as program:
        rank = Rank(0)
        out, inp = rank.get_output_buffer(), rank.get_input_buffer()
        rank.copy(out[0:1], inp[0:1], tb=0)  # reads input 0
        rank.copy(inp[0:1], inp[1:2], tb=1)  # overwrites input 0
        plan = _passes(program)
    assert _ops(plan, 0, 0) == ["copy", "sem_release"]
    assert _ops(plan, 0, 1) == ["sem_acquire", "copy"]


def test_user_barrier_and_semaphore_already_order_the_blocks() -> None:
    with _program() as program:
        rank = Rank(0)
        out, inp = rank.get_output_buffer(), rank.get_input_buffer()
        rank.copy(out[0:1], inp[0:1], tb=0)
        rank.barrier([0, 1])
        rank.copy(out[1:2], out[0:1], tb=1)
        semaphore = Semaphore(0, 0)
        rank.copy(inp[1:2], out[1:2], tb=1)
        semaphore.release(tb=1)
        semaphore.acquire(tb=2)
        rank.copy(inp[0:1], inp[1:2], tb=2)
        plan = _passes(program)
    assert "sem_acquire" not in _ops(plan, 0, 1)
    assert _ops(plan, 0, 2) == ["sem_acquire", "copy"]  # the user's acquire, nothing added
    assert len(plan.gpu(0).semaphores) == 1


def test_auto_sync_off_inserts_nothing() -> None:
    with _program(auto_sync=False) as program:
        rank = Rank(0)
        out, inp = rank.get_output_buffer(), rank.get_input_buffer()
        rank.copy(out[0:1], inp[0:1], tb=0)
        rank.copy(out[1:2], out[0:1], tb=1)
        plan = _passes(program)
    assert _ops(plan, 0, 1) == ["copy"]


def test_pipeline_body_gets_its_nop_inside() -> None:
    with _program() as program:
        rank = Rank(0)
        out, inp = rank.get_output_buffer(), rank.get_input_buffer()
        with LoopIterationContext(iterations=4):
            rank.copy(out[0:2], inp[0:2], tb=0)
            rank.copy(inp[0:2], out[0:2], tb=0)
        plan = _passes(program)
    pipeline = plan.gpu(0).threadblocks[0].ops[0]
    assert pipeline.op == "pipeline" and pipeline.iterations == 4
    assert [op.op for op in pipeline.body] == ["copy", "nop", "copy"]


def test_thread_block_group_splits_chunks_between_members() -> None:
    with _program() as program:
        rank = Rank(0)
        rank.copy(rank.get_output_buffer()[0:1], rank.get_input_buffer()[0:1], tb_group=ThreadBlockGroup([0, 1, 2]))
        plan = _passes(program)
    gpu = plan.gpu(0)
    assert gpu.input_chunks == 6  # 2 chunks, each cut in 3
    assert gpu.scratch_chunks == 0
    shares = [(tb.ops[0].src.index, tb.ops[0].src.count, tb.ops[0].dst.index) for tb in gpu.threadblocks[:3]]
    assert shares == [(0, 1, 0), (1, 1, 1), (2, 1, 2)]


def test_instances_take_disjoint_shares_and_their_own_resources() -> None:
    with CollectiveProgram("t", AllGather(2, 1, False), 2, instances=2, instr_fusion=False) as program:
        channels = {(a, b): MemoryChannel(b, a) for a in range(2) for b in range(2) if a != b}
        for r in range(2):
            rank = Rank(r)
            rank.copy(rank.get_output_buffer()[r : r + 1], rank.get_input_buffer()[0:1], tb=0)
            peer = 1 - r
            channels[(r, peer)].put(Rank(peer).get_output_buffer()[r : r + 1], rank.get_input_buffer()[0:1], tb=0)
            channels[(r, peer)].signal(tb=0)
            channels[(r, peer)].wait(tb=0)
        plan = program.compile()
    gpu = plan.gpu(1)
    assert (gpu.input_chunks, gpu.output_chunks) == (2, 4)
    assert [tb.id for tb in gpu.threadblocks] == [0, 1]
    assert [c.id for c in gpu.channels] == [0, 1]
    puts = [tb.ops[1] for tb in gpu.threadblocks]
    # rank 1's slot of the output is chunks 2-3 after doubling; instance j takes chunk 2 + j
    assert [(p.src.index, p.dsts[0].index, p.dsts[0].channel) for p in puts] == [(0, 2, 0), (1, 3, 1)]
    assert [tb.ops[2].channels for tb in gpu.threadblocks] == [[0], [1]]


def test_instances_split_a_range_that_crosses_slots() -> None:
    with CollectiveProgram("t", AllGather(2, 1, False), 2, instances=2, instr_fusion=False) as program:
        for r in range(2):
            rank = Rank(r)
            out = rank.get_output_buffer()
            rank.copy(out[0:2], out[0:2], tb=0)  # crosses from slot 0 into slot 1
        plan = program.compile()
    copies = [(op.src.index, op.src.count) for tb in plan.gpu(0).threadblocks for op in tb.ops]
    assert copies == [(0, 1), (2, 1), (1, 1), (3, 1)]


def test_resources_pair_one_way_channels_and_size_scratch() -> None:
    with _program() as program:
        scratch = Buffer(1, 3)
        channel = MemoryChannel(1, 0)
        channel.put(scratch[2:3], Rank(0).get_input_buffer()[0:1], tb=0)
        channel.signal(tb=0)
        MemoryChannel(0, 1).wait(tb=0)
        plan = resources.run(_passes(program))
    assert plan.gpu(1).scratch_chunks == 3
    assert [(c.type, c.peer) for c in plan.gpu(1).channels] == [("memory", 0)]

    with _program() as program:
        scratch = Buffer(1, 1)
        MemoryChannel(1, 0).put(scratch[0:1], Rank(0).get_input_buffer()[0:1], tb=0)
        plan = resources.run(_passes(program))
    assert [(c.id, c.type, c.peer) for c in plan.gpu(1).channels] == [(0, "memory", 0)]  # added, unused


def test_in_place_input_and_output_are_one_chunk() -> None:
    with CollectiveProgram("t", AllReduce(2, 1, True), 2, instr_fusion=False) as program:
        rank = Rank(0)
        out, inp = rank.get_output_buffer(), rank.get_input_buffer()
        rank.copy(out[1:2], inp[0:1], tb=0)  # reads input[0]
        rank.copy(out[0:1], out[1:2], tb=1)  # overwrites output[0], the same memory
        plan = _passes(program)
    assert _ops(plan, 0, 1)[0] == "sem_acquire"


def test_in_place_reduce_scatter_may_reduce_into_its_own_input_piece() -> None:
    with CollectiveProgram("t", ReduceScatter(2, 1, True), 2) as program:
        scratch = [Buffer(r, 1) for r in range(2)]
        for r in range(2):
            peer, rank = 1 - r, Rank(r)
            channel, back = MemoryChannel(peer, r), MemoryChannel(r, peer)
            channel.put(scratch[peer][0:1], rank.get_input_buffer()[peer : peer + 1], tb=0)
            channel.signal(tb=0)
            back.wait(tb=0)
            rank.reduce(rank.get_input_buffer()[r : r + 1], [scratch[r][0:1]], tb=0)
        plan = program.compile()  # no "output never written": output chunk 0 is input chunk r
    assert plan.gpu(1).output_chunks == 1
