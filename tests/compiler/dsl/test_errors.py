"""DSL mistakes are DSLErrors that name the user's line (this file) and say what is wrong."""

from __future__ import annotations

import inspect

import pytest
from loom.errors import DSLError
from loom.language import (
    AllGather,
    AllReduce,
    Buffer,
    CollectiveProgram,
    LoopIterationContext,
    MemoryChannel,
    PortChannel,
    Rank,
    ThreadBlockGroup,
)

HERE = __file__.rsplit("/", 1)[-1]


def _line_of(marker: str) -> int:
    """The line of this file that carries `# <marker>`."""
    for number, line in enumerate(inspect.getsource(inspect.getmodule(_line_of)).splitlines(), start=1):
        if line.rstrip().endswith(f"# {marker}"):
            return number
    raise AssertionError(marker)


def _expect(marker: str, fragment: str, body) -> None:
    with pytest.raises(DSLError) as caught:
        body()
    error = caught.value
    assert fragment in error.detail, error.detail
    assert error.loc is not None and error.loc.file == HERE and error.loc.line == _line_of(marker), error
    assert str(error).startswith(f"{HERE}:{_line_of(marker)}: ")


def _program(protocol: str = "Simple", n: int = 2) -> CollectiveProgram:
    return CollectiveProgram("t", AllReduce(n, 1, False), n, protocol=protocol)


def test_chunk_out_of_range() -> None:
    def body():
        with _program():
            Rank(0).get_input_buffer()[1:3]  # chunk-range

    _expect("chunk-range", "chunks 1 to 2 are out of range: rank 0's input buffer has 2 chunks", body)


def test_scratch_chunk_out_of_range() -> None:
    def body():
        with _program():
            scratch = Buffer(1, 2)
            scratch[2:3]  # scratch-range

    _expect("scratch-range", "chunks 2 to 2 are out of range: rank 1's scratch buffer has 2 chunks", body)


def test_channel_of_another_program_is_undeclared() -> None:
    with _program():
        stale = MemoryChannel(1, 0)

    def body():
        with _program():
            stale.signal(tb=0)  # undeclared

    _expect("undeclared", "MemoryChannel(dst_rank=1, src_rank=0) was not declared in this CollectiveProgram", body)


def test_chunk_on_a_rank_the_channel_does_not_reach() -> None:
    def body():
        with _program(n=4):
            channel = MemoryChannel(1, 0)
            channel.put(Rank(2).get_output_buffer()[0:1], Rank(0).get_input_buffer()[0:1], tb=0)  # wrong-peer

    _expect("wrong-peer", "dst_chunk is on rank 2, but MemoryChannel(dst_rank=1, src_rank=0) reaches rank 1", body)


def test_get_is_not_allowed_on_a_port_channel() -> None:
    def body():
        with _program():
            channel = PortChannel(1, 0)
            channel.get(Rank(0).get_input_buffer()[0:1], Rank(1).get_input_buffer()[0:1], tb=0)  # port-get

    _expect("port-get", "get needs a MemoryChannel", body)


def test_packet_op_needs_the_ll_protocol() -> None:
    def body():
        with _program("Simple"):
            scratch = Buffer(1, 1)
            MemoryChannel(1, 0).put_packets(scratch[0:1], Rank(0).get_input_buffer()[0:1], tb=0)  # protocol

    _expect("protocol", 'put_packets is a packet op and needs protocol "LL"', body)


def test_packet_op_outside_scratch() -> None:
    def body():
        with _program("LL"):
            out, inp = Rank(1).get_output_buffer(), Rank(0).get_input_buffer()
            MemoryChannel(1, 0).put_packets(out[0:1], inp[0:1], tb=0)  # pkt

    _expect("pkt", "dst_chunk must be in a scratch buffer (packets live in scratch), got the output buffer", body)


def test_unpack_from_outside_scratch() -> None:
    def body():
        with _program("LL"):
            rank = Rank(0)
            rank.unpack_packets(rank.get_output_buffer()[0:1], rank.get_input_buffer()[0:1], tb=0)  # unpack

    _expect("unpack", "src_chunk must be in a scratch buffer", body)


def test_conflicting_thread_block_placement() -> None:
    def body():
        with _program():
            rank = Rank(0)
            group = ThreadBlockGroup([1, 2])
            rank.copy(rank.get_output_buffer()[0:1], rank.get_input_buffer()[0:1], tb=0, tb_group=group)  # both

    _expect("both", "conflicting placement: give tb= or tb_group=, not both", body)


def test_missing_thread_block_placement() -> None:
    def body():
        with _program():
            rank = Rank(0)
            rank.copy(rank.get_output_buffer()[0:1], rank.get_input_buffer()[0:1])  # nowhere

    _expect("nowhere", "the op needs a placement", body)


def test_chunk_sizes_must_match() -> None:
    def body():
        with _program():
            rank = Rank(0)
            rank.copy(rank.get_output_buffer()[0:2], rank.get_input_buffer()[0:1], tb=0)  # sizes

    _expect("sizes", "dst_chunk has 2 chunks but src_chunk has 1", body)


def test_rank_out_of_range() -> None:
    def body():
        with _program():
            Rank(2)  # rank

    _expect("rank", "rank 2 is out of range: this program has ranks 0 to 1", body)


def test_a_pipeline_unit_must_be_a_multiple_of_16_bytes() -> None:
    def body():
        with _program():
            with LoopIterationContext(unit=1000, num_chunks=1):  # unit
                pass

    _expect("unit", "unit must be a multiple of 16 bytes below 2**32, got 1000", body)


def test_num_chunks_must_be_the_longest_range_of_a_unit_pipeline() -> None:
    def body():
        with _program():
            with LoopIterationContext(unit=1 << 20, num_chunks=1):
                rank = Rank(0)
                rank.copy(rank.get_output_buffer()[0:2], rank.get_input_buffer()[0:2], tb=0)  # num_chunks

    _expect("num_chunks", "LoopIterationContext(num_chunks=1) but the longest chunk range in its body has 2", body)


def test_output_never_written() -> None:
    def body():
        with CollectiveProgram("t", AllGather(2, 1, False), 2) as program:  # noqa: F841
            for r in range(2):
                rank = Rank(r)
                rank.copy(rank.get_output_buffer()[r : r + 1], rank.get_input_buffer()[0:1], tb=0)
            program.to_json()  # unwritten

    with pytest.raises(DSLError) as caught:
        body()
    assert "the allgather can never be complete: no op writes output chunk 1 of rank 0" in str(caught.value)


def test_signal_without_wait() -> None:
    def body():
        with _program() as program:
            MemoryChannel(1, 0).signal(tb=0)  # lonely
            for r in range(2):
                rank = Rank(r)
                rank.copy(rank.get_output_buffer()[0:2], rank.get_input_buffer()[0:2], tb=0)
            program.to_json()

    _expect(
        "lonely",
        "rank 0 signals rank 1 1 time(s) on its first memory channel to rank 1, but rank 1 waits 0 time(s)",
        body,
    )


def test_no_active_program() -> None:
    def body():
        Rank(0)  # outside

    _expect("outside", "no CollectiveProgram is active", body)


def test_bad_program_arguments_name_the_argument() -> None:
    with pytest.raises(DSLError, match="protocol must be"):
        CollectiveProgram("t", AllReduce(2, 1, False), 2, protocol="LL128")
    with pytest.raises(DSLError, match="num_ranks is 4 but the collective was made for 2 ranks"):
        CollectiveProgram("t", AllReduce(2, 1, False), 4)
    with pytest.raises(DSLError, match="ranks_per_node must divide num_ranks 4"):
        CollectiveProgram("t", AllReduce(4, 1, False), 4, ranks_per_node=3)


def test_signal_and_wait_on_channels_that_do_not_pair() -> None:
    def body():
        with _program() as program:
            first, _ = MemoryChannel(1, 0), MemoryChannel(1, 0)
            _, back_second = MemoryChannel(0, 1), MemoryChannel(0, 1)
            first.signal(tb=0)  # unpaired
            back_second.wait(tb=0)
            for r in range(2):
                rank = Rank(r)
                rank.copy(rank.get_output_buffer()[0:2], rank.get_input_buffer()[0:2], tb=0)
            program.to_json()

    _expect("unpaired", "on its first memory channel to rank 1, but rank 1 waits 0 time(s) on its first", body)
