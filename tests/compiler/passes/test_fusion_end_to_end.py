"""DSL programs compiled with and without instr_fusion: the fused ops appear, what they do is what
the unfused ops did, and the plan stays schema-valid."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from loom.compiler.emit import emit_plan
from loom.ir import ChunkRef
from loom.ir import model as ir
from loom.language import AllReduce, Buffer, CollectiveProgram, MemoryChannel, PortChannel, Rank
from loom.plan.schema import check_schema


def _mesh(n: int, kind: type) -> dict[tuple[int, int], MemoryChannel | PortChannel]:
    return {(r, p): kind(p, r) for r in range(n) for p in range(n) if p != r}


def read_reduce_program(instr_fusion: bool) -> CollectiveProgram:
    """3 ranks over memory channels: rank r reads chunk r of both peers, then sends the sum back."""
    n = 3
    with CollectiveProgram("rr", AllReduce(n, 1, False), n, instr_fusion=instr_fusion) as program:
        channels = _mesh(n, MemoryChannel)
        for r in range(n):
            rank, peers = Rank(r), [p for p in range(n) if p != r]
            inp, out = rank.get_input_buffer(), rank.get_output_buffer()
            for p in peers:
                channels[(r, p)].signal(tb=0)
            for p in peers:
                channels[(r, p)].wait(tb=0)
            first, second = (Rank(p).get_input_buffer()[r : r + 1] for p in peers)
            channels[(r, peers[0])].reduce(inp[r : r + 1], [first], tb=0, local_dst_chunk=out[r : r + 1])
            channels[(r, peers[1])].reduce(out[r : r + 1], [second], tb=0)
            for p in peers:
                channels[(r, p)].put(Rank(p).get_output_buffer()[r : r + 1], out[r : r + 1], tb=0)
            for p in peers:
                channels[(r, p)].signal(tb=0)
            for p in peers:
                channels[(r, p)].wait(tb=0)
    return program


def port_program(instr_fusion: bool) -> CollectiveProgram:
    """2 ranks over port channels: send the peer's half, reduce mine, send the result back."""
    with CollectiveProgram("port", AllReduce(2, 1, False), 2, instr_fusion=instr_fusion) as program:
        scratch = [Buffer(r, 1) for r in range(2)]
        channels = _mesh(2, PortChannel)
        for r in range(2):
            p, rank = 1 - r, Rank(r)
            inp, out, channel = rank.get_input_buffer(), rank.get_output_buffer(), channels[(r, 1 - r)]
            channel.put(scratch[p][0:1], inp[p : p + 1], tb=0)
            channel.signal(tb=0)
            channel.flush(tb=0)
            channel.wait(tb=0)
            rank.reduce(inp[r : r + 1], [scratch[r][0:1]], tb=0, dst_chunk=out[r : r + 1])
            channel.put(Rank(p).get_output_buffer()[r : r + 1], out[r : r + 1], tb=0)
            channel.signal(tb=0)
            channel.wait(tb=0)
    return program


def packet_program(instr_fusion: bool) -> CollectiveProgram:
    """3 ranks, LL: chunk p goes to rank p as packets; rank r reduces chunk r, packs it, forwards it."""
    n = 3
    with CollectiveProgram("ll", AllReduce(n, 1, False), n, protocol="LL", instr_fusion=instr_fusion) as program:
        scratch = [Buffer(r, 2 * n - 1) for r in range(n)]
        channels = _mesh(n, MemoryChannel)

        def slot(r: int, p: int) -> int:  # where rank r keeps what rank p sent it
            return p if p < r else p - 1

        for r in range(n):
            rank, peers = Rank(r), [p for p in range(n) if p != r]
            inp, out, own = rank.get_input_buffer(), rank.get_output_buffer(), scratch[r]
            for p in peers:
                channels[(r, p)].put_packets(scratch[p][slot(p, r) : slot(p, r) + 1], inp[p : p + 1], tb=0)
            received = [own[slot(r, p) : slot(r, p) + 1] for p in peers]
            rank.reduce(inp[r : r + 1], received, tb=0, dst_chunk=out[r : r + 1], packet=True)
            rank.copy_packets(own[n - 1 : n], out[r : r + 1], tb=0)
            for p in peers:
                at = n + slot(p, r)
                channels[(r, p)].read_put_packets(scratch[p][at : at + 1], own[n - 1 : n], tb=0)
            for p in peers:
                at = n + slot(r, p)
                rank.unpack_packets(out[p : p + 1], own[at : at + 1], tb=0)
    return program


def _rank0(program: CollectiveProgram) -> list[ir.Op]:
    return program.compile().gpu(0).threadblocks[0].ops


def _names(ops: list[ir.Op]) -> list[str]:
    return [op.op for op in ops]


def _data_and_signals(ops: list[ir.Op]) -> list[str]:
    """The op names without the dependency pass's nops (where they go is that pass's business)."""
    return [op.op for op in ops if op.op != "nop"]


def test_read_reduce_send_and_multi_channel_syncs() -> None:
    assert _data_and_signals(_rank0(read_reduce_program(False))) == (
        ["signal", "signal", "wait", "wait", "read_reduce", "read_reduce", "put", "put"]
        + ["signal", "signal", "wait", "wait"]
    )
    fused = _rank0(read_reduce_program(True))
    # The two read-reduces chain into one (rule 1a), which then takes the put (rule 5).
    assert _names(fused) == ["signal", "wait", "read_reduce_send", "signal", "wait"]
    assert fused[0].channels == [0, 1] and fused[1].channels == [0, 1]
    send = fused[2]
    assert len(send.srcs) == 3
    assert send.dst == ChunkRef("output", 0) and send.dsts == [ChunkRef("output", 0, 1, 0), ChunkRef("output", 0, 1, 1)]


def test_put_with_signal_and_flush_and_reduce_send_over_a_port_channel() -> None:
    assert _data_and_signals(_rank0(port_program(False))) == (
        ["put", "signal", "flush", "wait", "reduce", "put", "signal", "wait"]
    )
    fused = _rank0(port_program(True))
    assert _names(fused) == ["put_with_signal_and_flush", "wait", "reduce_send", "signal", "wait"]
    program = port_program(True)
    send = _rank0(program)[2]
    assert send.dst == ChunkRef("output", 0) and send.dsts == [ChunkRef("output", 0, 1, 0)]
    assert program.compile().gpu(0).channel(0).type == "port"


def test_packet_reduction_packing_and_forwarding_become_one_op() -> None:
    assert _data_and_signals(_rank0(packet_program(False))) == (
        ["put_packet", "put_packet", "reduce_packet", "copy_packet", "read_put_packet"]
        + ["read_put_packet", "unpack_packet", "unpack_packet"]
    )
    fused = _rank0(packet_program(True))
    assert _names(fused) == ["put_packet", "reduce_copy_send_packet", "unpack_packet", "unpack_packet"]
    puts = fused[0]  # rank 0 sends input[p] to peer p: one op, a source per destination (rule 6a)
    assert puts.src is None and puts.srcs == [ChunkRef("input", 1), ChunkRef("input", 2)]
    assert [ref.channel for ref in puts.dsts] == [0, 1]
    op = fused[1]
    assert op.packet_dst == ChunkRef("scratch", 2) and op.dst == ChunkRef("output", 0)
    assert op.dsts == [ChunkRef("scratch", 3, 1, 0), ChunkRef("scratch", 3, 1, 1)]  # the slot of rank 0 at each peer


@pytest.mark.parametrize("build", [read_reduce_program, port_program, packet_program])
@pytest.mark.parametrize("instr_fusion", [False, True])
def test_plans_stay_schema_valid(build: Callable[[bool], CollectiveProgram], instr_fusion: bool) -> None:
    document = emit_plan(build(instr_fusion))
    check_schema(document, "fusion")
    assert document["metadata"]["parameters"]["instr_fusion"] is instr_fusion
