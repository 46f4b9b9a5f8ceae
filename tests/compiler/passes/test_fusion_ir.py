"""Fusion at the IR level, on ops built directly: when an auto nop may go (the ops before and after
it in detail), loc and seq of the fused op, chains, pipelines, and the pass order. Each test builds
thread block 0 of rank 0 and runs one pass (or all of them)."""

from __future__ import annotations

import pytest
from loom.ir import model as ir
from loom.passes import (
    FUSION_PASSES,
    fuse,
    fuse_multi_channel,
    fuse_multi_dst,
    fuse_put_signal,
    fuse_reduce_copy_packet,
    fuse_reduce_send,
    fuse_reduce_send_packet,
)

MEMORY, PORT, MEMORY2, PORT2 = 0, 1, 2, 3


def ref(buffer: str, index: int, channel: int | None = None, count: int = 1) -> ir.ChunkRef:
    return ir.ChunkRef(buffer, index, count, channel)


def nop(auto: bool = True) -> ir.Op:
    return ir.Op("nop", auto=auto)


def plan_of(*ops: ir.Op, protocol: str = "simple") -> ir.Plan:
    """Rank 0 runs ops in thread block 0; it has memory channels 0, 2 and port channels 1, 3 to rank 1."""
    for seq, op in enumerate(ops):
        op.seq = seq
        op.loc = ir.SourceLoc("prog.py", 10 + seq)
    channels = [ir.Channel(MEMORY, "memory", 1), ir.Channel(PORT, "port", 1)]
    channels += [ir.Channel(MEMORY2, "memory", 1), ir.Channel(PORT2, "port", 1)]
    plan = ir.Plan("t", "allreduce", protocol, world_size=2, ranks_per_node=2)
    plan.gpus.append(ir.Gpu(0, 4, 4, 4, channels=channels, threadblocks=[ir.ThreadBlock(0, list(ops))]))
    plan.gpus.append(ir.Gpu(1, 4, 4, 4))
    return plan


def ops_of(plan: ir.Plan) -> list[ir.Op]:
    return plan.gpu(0).threadblocks[0].ops


def names(plan: ir.Plan) -> list[str]:
    return [op.op for op in ops_of(plan)]


def reduce(dst: int = 0) -> ir.Op:
    return ir.Op("reduce", srcs=[ref("input", 0), ref("scratch", 0)], dst=ref("output", dst), reduce_op="sum")


def put(src: ir.ChunkRef, *dsts: ir.ChunkRef) -> ir.Op:
    return ir.Op("put", src=src, dsts=list(dsts))


def test_fusion_passes_are_registered_in_order() -> None:
    assert [p.__name__.rsplit(".", 1)[1] for p in FUSION_PASSES] == [
        "fuse_dead_store",
        "fuse_multi_dst",
        "fuse_reduce_chain",
        "fuse_reduce_copy_packet",
        "fuse_reduce_send_packet",
        "fuse_reduce_send",
        "fuse_read_reduce_send",
        "fuse_multimem",
        "fuse_put_signal",
        "fuse_paired_sends",
        "fuse_multi_channel",
    ]


def test_fused_op_keeps_the_first_ops_loc_and_seq() -> None:
    plan = fuse_reduce_send.run(plan_of(reduce(), put(ref("output", 0), ref("output", 0, PORT))))
    (fused,) = ops_of(plan)
    assert fused.op == "reduce_send" and fused.loc == ir.SourceLoc("prog.py", 10) and fused.seq == 0
    assert fused.dst == ref("output", 0) and fused.dsts == [ref("output", 0, PORT)]


def test_auto_nop_for_the_fused_data_flow_is_dropped() -> None:
    plan = fuse_reduce_send.run(plan_of(reduce(), nop(), put(ref("output", 0), ref("output", 0, MEMORY))))
    assert names(plan) == ["reduce_send"]


def test_nop_the_author_wrote_blocks_fusion() -> None:
    plan = fuse_reduce_send.run(plan_of(reduce(), nop(auto=False), put(ref("output", 0), ref("output", 0, MEMORY))))
    assert names(plan) == ["reduce", "nop", "put"]


@pytest.mark.parametrize("between", ["sem_acquire", "sem_release"])
def test_semaphore_op_between_blocks_fusion(between: str) -> None:
    sync = ir.Op(between, semaphores=[0], auto=True)
    plan = fuse_reduce_send.run(plan_of(reduce(), sync, put(ref("output", 0), ref("output", 0, MEMORY))))
    assert names(plan) == ["reduce", between, "put"]


def test_auto_nop_that_an_earlier_op_needs_keeps_the_pair_apart() -> None:
    # The nop is there for the fused data flow (output 0) and also because the copy_packet overwrites
    # scratch 1, which the first copy reads: without the nop, that read would race with the packing.
    reader = ir.Op("copy", src=ref("scratch", 1), dst=ref("output", 2))
    reduce_packet = ir.Op(
        "reduce_packet", src=ref("input", 0), srcs=[ref("scratch", 0)], dst=ref("output", 0), reduce_op="sum"
    )
    copy_packet = ir.Op("copy_packet", src=ref("output", 0), dst=ref("scratch", 1))
    plan = fuse_reduce_copy_packet.run(plan_of(reader, reduce_packet, nop(), copy_packet, protocol="ll"))
    assert names(plan) == ["copy", "reduce_packet", "nop", "copy_packet"]


def test_earlier_op_behind_another_sync_does_not_keep_the_nop() -> None:
    reader = ir.Op("copy", src=ref("scratch", 1), dst=ref("output", 2))
    reduce_packet = ir.Op(
        "reduce_packet", src=ref("input", 0), srcs=[ref("scratch", 0)], dst=ref("output", 0), reduce_op="sum"
    )
    copy_packet = ir.Op("copy_packet", src=ref("output", 0), dst=ref("scratch", 1))
    plan = fuse_reduce_copy_packet.run(plan_of(reader, nop(), reduce_packet, nop(), copy_packet, protocol="ll"))
    assert names(plan) == ["copy", "nop", "reduce_copy_packet"]


def test_auto_nop_that_a_later_op_needs_stays_after_the_fused_pair() -> None:
    # The last copy reads what the reduce wrote; only the nop orders it after the reduce: it stays.
    reader = ir.Op("copy", src=ref("output", 0), dst=ref("input", 3))
    plan = fuse_reduce_send.run(plan_of(reduce(), nop(), put(ref("output", 0), ref("output", 0, MEMORY)), reader))
    assert names(plan) == ["reduce_send", "nop", "copy"]


def test_auto_nop_an_earlier_op_needs_before_the_second_keeps_the_pair_apart() -> None:
    # The first copy writes the peer's output 0, which the put also writes: the put must stay after the nop.
    writer = ir.Op("copy", src=ref("input", 1), dst=ref("output", 0, MEMORY))
    put_ = put(ref("output", 0), ref("output", 0, MEMORY))
    plan = fuse_reduce_send.run(plan_of(writer, reduce(), nop(), put_))
    assert names(plan) == ["copy", "reduce", "nop", "put"]


def test_later_op_behind_another_sync_does_not_keep_the_nop() -> None:
    reader = ir.Op("copy", src=ref("output", 0), dst=ref("input", 3))
    plan = fuse_reduce_send.run(
        plan_of(reduce(), nop(), put(ref("output", 0), ref("output", 0, MEMORY)), nop(), reader)
    )
    assert names(plan) == ["reduce_send", "nop", "copy"]


def test_second_op_writing_what_the_first_reads_keeps_the_nop() -> None:
    # reduce_packet reads scratch 1; the copy_packet packs into scratch 1: a write after read.
    reduce_packet = ir.Op(
        "reduce_packet", src=ref("input", 0), srcs=[ref("scratch", 1)], dst=ref("output", 0), reduce_op="sum"
    )
    copy_packet = ir.Op("copy_packet", src=ref("output", 0), dst=ref("scratch", 1))
    plan = fuse_reduce_copy_packet.run(plan_of(reduce_packet, nop(), copy_packet, protocol="ll"))
    assert names(plan) == ["reduce_packet", "nop", "copy_packet"]


def test_fusion_inside_a_pipeline_body_but_not_across_its_boundary() -> None:
    body = [reduce(), nop(), put(ref("output", 0), ref("output", 0, MEMORY))]
    pipeline = ir.Op("pipeline", iterations=4, body=body)
    outside = put(ref("output", 0), ref("output", 1, MEMORY))
    plan = fuse_reduce_send.run(plan_of(reduce(dst=0), pipeline, outside))
    assert names(plan) == ["reduce", "pipeline", "put"]
    assert [op.op for op in ops_of(plan)[1].body] == ["reduce_send"]


def test_pipeline_ends_are_not_adjacent_to_ops_outside() -> None:
    pipeline = ir.Op("pipeline", iterations=2, body=[reduce()])
    plan = fuse_reduce_send.run(plan_of(pipeline, put(ref("output", 0), ref("output", 0, MEMORY))))
    assert names(plan) == ["pipeline", "put"]


def test_chain_of_puts_folds_into_one_op() -> None:
    src = ref("input", 0)
    puts = [put(src, ref("scratch", i, c)) for i, c in enumerate((MEMORY, MEMORY2, MEMORY))]
    plan = fuse_multi_dst.run(plan_of(*puts))
    (fused,) = ops_of(plan)
    assert fused.dsts == [ref("scratch", 0, MEMORY), ref("scratch", 1, MEMORY2), ref("scratch", 2, MEMORY)]


def test_puts_over_memory_and_port_channels_stay_apart() -> None:
    src = ref("input", 0)
    plan = fuse_multi_dst.run(plan_of(put(src, ref("scratch", 0, MEMORY)), put(src, ref("scratch", 0, PORT))))
    assert names(plan) == ["put", "put"]


def test_ranges_must_match_exactly() -> None:
    wide = ref("input", 0, count=2)
    plan = fuse_multi_dst.run(plan_of(put(wide, ref("scratch", 0, MEMORY)), put(ref("input", 0), ref("scratch", 2))))
    assert names(plan) == ["put", "put"]


def test_read_put_packet_after_reduce_copy_packet_sends_the_packed_result() -> None:
    rcp = ir.Op(
        "reduce_copy_packet",
        src=ref("input", 0),
        srcs=[ref("scratch", 0)],
        dst=ref("output", 0),
        packet_dst=ref("scratch", 2),
        reduce_op="max",
    )
    forward = ir.Op("read_put_packet", src=ref("scratch", 2), dsts=[ref("scratch", 3, MEMORY)])
    plan = fuse_reduce_send_packet.run(plan_of(rcp, forward, protocol="ll"))
    (fused,) = ops_of(plan)
    assert fused.op == "reduce_copy_send_packet" and fused.reduce_op == "max"
    assert fused.packet_dst == ref("scratch", 2) and fused.dsts == [ref("scratch", 3, MEMORY)]


def test_put_signal_flush_chain_becomes_one_request() -> None:
    ops = [put(ref("input", 0), ref("output", 0, PORT))]
    ops += [ir.Op("signal", channels=[PORT], data_sync="before"), ir.Op("flush", channels=[PORT])]
    plan = fuse_put_signal.run(plan_of(*ops))
    assert names(plan) == ["put_with_signal_and_flush"]


def test_relaxed_signal_does_not_fuse_into_a_put() -> None:
    ops = [put(ref("input", 0), ref("output", 0, PORT)), ir.Op("signal", channels=[PORT], relaxed=True)]
    assert names(fuse_put_signal.run(plan_of(*ops))) == ["put", "signal"]


def test_waits_with_the_same_data_sync_merge_and_keep_it() -> None:
    ops = [ir.Op("wait", channels=[c], data_sync="after") for c in (MEMORY, MEMORY2)]
    (merged,) = ops_of(fuse_multi_channel.run(plan_of(*ops)))
    assert merged.channels == [MEMORY, MEMORY2] and merged.data_sync == "after" and merged.loc.line == 10


def test_signals_on_memory_and_port_channels_stay_apart() -> None:
    ops = [ir.Op("signal", channels=[c]) for c in (MEMORY, PORT)]
    assert names(fuse_multi_channel.run(plan_of(*ops))) == ["signal", "signal"]


def test_all_fusion_passes_together_fold_a_send_to_two_peers() -> None:
    ops = [
        ir.Op("reduce_packet", src=ref("input", 0), srcs=[ref("scratch", 0)], dst=ref("output", 0), reduce_op="sum"),
        nop(),
        ir.Op("copy_packet", src=ref("output", 0), dst=ref("scratch", 1)),
        nop(),
        ir.Op("read_put_packet", src=ref("scratch", 1), dsts=[ref("scratch", 2, MEMORY)]),
        ir.Op("read_put_packet", src=ref("scratch", 1), dsts=[ref("scratch", 2, MEMORY2)]),
    ]
    (fused,) = ops_of(fuse(plan_of(*ops, protocol="ll")))
    assert fused.op == "reduce_copy_send_packet"
    assert fused.packet_dst == ref("scratch", 1)
    assert fused.dsts == [ref("scratch", 2, MEMORY), ref("scratch", 2, MEMORY2)]


def test_a_nop_ordering_a_write_and_a_read_of_one_chunk_under_its_two_in_place_names_stays() -> None:
    # In place, input[2] and output[2] of an all-reduce are one chunk: the copy into output[2] before
    # the pair and the copy out of input[2] after it conflict, and only the nop orders them.
    writer = ir.Op("copy", src=ref("scratch", 1), dst=ref("output", 2))
    reader = ir.Op("copy", src=ref("input", 2), dst=ref("scratch", 3))
    plan = plan_of(writer, reduce(), nop(), put(ref("output", 0), ref("output", 0, MEMORY)), reader)
    plan.inplace = True
    plan = fuse_reduce_send.run(plan)
    # The nop stays after the fused pair (still between the writer and the reader).
    assert names(plan) == ["copy", "reduce_send", "nop", "copy"]
    plan = plan_of(writer, reduce(), nop(), put(ref("output", 0), ref("output", 0, MEMORY)), reader)
    plan = fuse_reduce_send.run(plan)  # out of place the two are different chunks: the nop goes
    assert names(plan) == ["copy", "reduce_send", "copy"]
