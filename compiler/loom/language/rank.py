"""Ranks, their buffers, local operations, and semaphores."""

from __future__ import annotations

import dataclasses

from loom.errors import DSLError
from loom.ir import model as ir
from loom.language.id_counters import NumberedPerProgram
from loom.language.program import caller_location, get_program
from loom.language.thread_block_group import ThreadBlockGroup, placements
from loom.language.types import BufferType, Chunk, ReduceOperationType, SyncType


def fail(message: str) -> None:
    raise DSLError(message, caller_location())


def local_ref(chunk: Chunk) -> ir.ChunkRef:
    return ir.ChunkRef(chunk.buffer.value, chunk.index, chunk.size)


def check_chunk(chunk: object, what: str) -> Chunk:
    if not isinstance(chunk, Chunk):
        fail(f"{what} must be a chunk (buffer[i:j]), got {chunk!r}")
    if chunk.size < 1:
        fail(f"{what} is empty ({chunk.buffer}[{chunk.index}:{chunk.index}]); an op needs at least one chunk")
    return chunk


def check_same_size(chunks: list[tuple[str, Chunk]]) -> None:
    first_name, first = chunks[0]
    for name, chunk in chunks[1:]:
        if chunk.size != first.size:
            fail(
                f"{name} has {chunk.size} chunks but {first_name} has {first.size};"
                " an op's chunk ranges are equally long"
            )


def check_protocol_ll(op_name: str) -> None:
    if get_program().protocol != "ll":
        fail(f'{op_name} is a packet op and needs protocol "LL"; this program\'s protocol is "Simple"')


def check_scratch(chunk: Chunk, what: str, op_name: str) -> None:
    if chunk.buffer != BufferType.scratch:
        fail(f"{op_name}: {what} must be in a scratch buffer (packets live in scratch), got the {chunk.buffer} buffer")


def record(rank: int, tb: int | None, tb_group: ThreadBlockGroup | None, op: ir.Op) -> None:
    """Add op to every thread block the placement names; group members each get their share."""
    program = get_program()
    for tb_id, share in placements(tb, tb_group):
        program.add_operation(rank, tb_id, dataclasses.replace(op, tb_group=share))


def reduce_name(reduce_op: object) -> str:
    if isinstance(reduce_op, ReduceOperationType):
        return reduce_op.value
    if reduce_op in ("sum", "min", "max"):
        return str(reduce_op)
    fail(f"reduce_op must be ReduceOperationType.sum, min or max, got {reduce_op!r}")
    return ""


def sync_name(data_sync: object) -> str:
    try:
        return SyncType(data_sync).plan_name
    except ValueError:
        fail(f"data_sync must be a SyncType (none, before, after, both), got {data_sync!r}")
    return ""


class BaseBuffer:
    """One of a rank's buffers; slicing ``buffer[i:j]`` gives the chunks i..j-1."""

    def __init__(self, rank: int, buffer_type: BufferType, offset: int, size: int) -> None:
        self.rank = rank
        self.buffer_type = buffer_type
        self.offset = offset
        self.size = offset + size  # one past the last chunk, as in MSCCL++

    def __getitem__(self, key: slice) -> Chunk:
        if not isinstance(key, slice):
            fail(f"buffers are sliced, not indexed: write buffer[{key!r}:{key!r} + 1]")
        if key.step not in (None, 1):
            fail(f"buffer slices take no step (got step {key.step})")
        length = self.size - self.offset
        start = 0 if key.start is None else key.start
        stop = length if key.stop is None else key.stop
        if not isinstance(start, int) or not isinstance(stop, int) or start < 0 or stop < 0:
            fail(f"buffer slice bounds must be non-negative integers, got [{key.start!r}:{key.stop!r}]")
        if start > stop:
            fail(f"buffer slice start {start} is after its stop {stop}")
        if stop > length:
            fail(
                f"chunks {start} to {stop - 1} are out of range: rank {self.rank}'s {self.buffer_type} buffer "
                f"has {length} chunks"
            )
        return Chunk(self.rank, self.buffer_type, self.offset + start, stop - start)


class Buffer(BaseBuffer):
    """A scratch buffer of ``size`` chunks on ``rank``; successive Buffers of a rank do not overlap."""

    def __init__(self, rank: int, size: int) -> None:
        program = get_program()
        program.check_rank(rank)
        if not isinstance(size, int) or size < 1:
            fail(f"a scratch Buffer needs a positive size in chunks, got {size!r}")
        super().__init__(rank, BufferType.scratch, program.declare_scratch(rank, size), size)


class Rank:
    """One GPU of the program; its methods record local ops."""

    def __init__(self, rank: int) -> None:
        self.rank = get_program().check_rank(rank)

    def get_input_buffer(self) -> BaseBuffer:
        return BaseBuffer(self.rank, BufferType.input, 0, get_program().gpu(self.rank).input_chunks)

    def get_output_buffer(self) -> BaseBuffer:
        return BaseBuffer(self.rank, BufferType.output, 0, get_program().gpu(self.rank).output_chunks)

    def _own(self, chunk: Chunk, what: str) -> Chunk:
        check_chunk(chunk, what)
        if chunk.rank != self.rank:
            fail(
                f"{what} is on rank {chunk.rank}, but Rank({self.rank}) only works on its own buffers;"
                f" use a channel to reach rank {chunk.rank}"
            )
        return chunk

    def _local(self, name: str, dst_chunk: Chunk, src_chunk: Chunk, tb, tb_group) -> None:
        dst, src = self._own(dst_chunk, "dst_chunk"), self._own(src_chunk, "src_chunk")
        check_same_size([("src_chunk", src), ("dst_chunk", dst)])
        if name != "copy":
            check_protocol_ll(name)
            check_scratch(
                src if name == "unpack_packet" else dst, "src_chunk" if name == "unpack_packet" else "dst_chunk", name
            )
        record(self.rank, tb, tb_group, ir.Op(name, src=local_ref(src), dst=local_ref(dst)))

    def copy(
        self, dst_chunk: Chunk, src_chunk: Chunk, tb: int | None = None, tb_group: ThreadBlockGroup | None = None
    ) -> None:
        """dst = src, both on this rank."""
        self._local("copy", dst_chunk, src_chunk, tb, tb_group)

    def copy_packets(
        self, dst_chunk: Chunk, src_chunk: Chunk, tb: int | None = None, tb_group: ThreadBlockGroup | None = None
    ) -> None:
        """Pack src into LL packets in the scratch chunk dst."""
        self._local("copy_packet", dst_chunk, src_chunk, tb, tb_group)

    def unpack_packets(
        self, dst_chunk: Chunk, src_chunk: Chunk, tb: int | None = None, tb_group: ThreadBlockGroup | None = None
    ) -> None:
        """Wait for the packets in the scratch chunk src and write their data to dst."""
        self._local("unpack_packet", dst_chunk, src_chunk, tb, tb_group)

    def reduce(
        self,
        src_chunk: Chunk,
        other_chunks: list[Chunk],
        tb: int | None = None,
        tb_group: ThreadBlockGroup | None = None,
        dst_chunk: Chunk | None = None,
        reduce_op: ReduceOperationType = ReduceOperationType.sum,
        packet: bool = False,
    ) -> None:
        """dst = src (op) other_chunks...; dst defaults to src. packet=True: other_chunks are LL packets in scratch."""
        src = self._own(src_chunk, "src_chunk")
        dst = self._own(src if dst_chunk is None else dst_chunk, "dst_chunk")
        others = (
            list(other_chunks)
            if isinstance(other_chunks, (list, tuple))
            else fail("other_chunks must be a list of chunks")
        )
        if not others:
            fail("other_chunks is empty: a reduction needs at least one chunk besides src_chunk")
        named = [("src_chunk", src), ("dst_chunk", dst)]
        named += [(f"other_chunks[{i}]", self._own(chunk, f"other_chunks[{i}]")) for i, chunk in enumerate(others)]
        check_same_size(named)
        op_name = reduce_name(reduce_op)
        if packet:
            check_protocol_ll("reduce(packet=True)")
            for i, chunk in enumerate(others):
                check_scratch(chunk, f"other_chunks[{i}]", "reduce(packet=True)")
            op = ir.Op(
                "reduce_packet",
                src=local_ref(src),
                srcs=[local_ref(c) for c in others],
                dst=local_ref(dst),
                reduce_op=op_name,
            )
        else:
            op = ir.Op(
                "reduce", srcs=[local_ref(src)] + [local_ref(c) for c in others], dst=local_ref(dst), reduce_op=op_name
            )
        record(self.rank, tb, tb_group, op)

    def barrier(self, tb_list: list[int]) -> None:
        """The listed thread blocks of this rank wait for each other here."""
        program = get_program()
        tbs = [tb for tb, _ in placements(None, ThreadBlockGroup(tb_list))]
        barrier_id = program.new_barrier_id(self.rank)
        for tb in tbs:
            program.add_operation(self.rank, tb, ir.Op("barrier", barrier_id=barrier_id, threadblocks=sorted(tbs)))


class Semaphore(NumberedPerProgram):
    """A counter shared by the thread blocks of one rank: release adds one, acquire waits for one and takes it."""

    def __init__(self, rank: int, initial_value: int) -> None:
        program = get_program()
        self.rank = program.check_rank(rank)
        if not isinstance(initial_value, int) or initial_value < 0:
            fail(f"initial_value must be a non-negative integer, got {initial_value!r}")
        self.initial_value = initial_value
        self.id = program.add_semaphore(rank, initial_value)
        self._program = program

    def _record(self, name: str, tb: int, data_sync: SyncType) -> None:
        if get_program() is not self._program:
            fail("this semaphore belongs to another CollectiveProgram")
        record(self.rank, tb, None, ir.Op(name, semaphores=[self.id], data_sync=sync_name(data_sync)))

    def acquire(self, tb: int, data_sync: SyncType = SyncType.both) -> None:
        self._record("sem_acquire", tb, data_sync)

    def release(self, tb: int, data_sync: SyncType = SyncType.both) -> None:
        self._record("sem_release", tb, data_sync)


# What `from ...rank import *` gives an MSCCL++ program: these classes and the types they take.
__all__ = [
    "BaseBuffer",
    "Buffer",
    "BufferType",
    "Chunk",
    "Rank",
    "ReduceOperationType",
    "Semaphore",
    "SyncType",
    "ThreadBlockGroup",
]
