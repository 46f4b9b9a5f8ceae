"""Channels: MemoryChannel and PortChannel connect two ranks, SwitchChannel a multicast group.

A channel object belongs to its source rank (``src_rank``), which runs every op recorded through
it; ``dst_rank`` is the peer. Signals pair up with the peer's waits on its channel back to us.
"""

from __future__ import annotations

from loom.ir import model as ir
from loom.language.id_counters import NumberedPerProgram
from loom.language.program import get_program
from loom.language.rank import (
    check_chunk,
    check_protocol_ll,
    check_same_size,
    check_scratch,
    fail,
    local_ref,
    record,
    reduce_name,
    sync_name,
)
from loom.language.thread_block_group import ThreadBlockGroup
from loom.language.types import BufferType, ChannelType, Chunk, ReduceOperationType, SyncType


class _PeerChannel(NumberedPerProgram):
    """What memory and port channels share: declaration, rank checks, sync ops, puts."""

    channel_type: ChannelType

    def __init__(self, dst_rank: int, src_rank: int) -> None:
        program = get_program()
        program.check_rank(src_rank, "src_rank")
        program.check_rank(dst_rank, "dst_rank")
        if src_rank == dst_rank:
            fail(f"a channel connects two different ranks, got src_rank = dst_rank = {src_rank}")
        self.src_rank = src_rank
        self.dst_rank = dst_rank
        self._program = program
        self.channel_id = program.add_channel(src_rank, ir.Channel(0, self.channel_type.value, peer=dst_rank))

    def _use(self) -> None:
        if get_program() is not self._program:
            fail(f"{self._describe()} was not declared in this CollectiveProgram")

    def _describe(self) -> str:
        return f"{type(self).__name__}(dst_rank={self.dst_rank}, src_rank={self.src_rank})"

    def _local(self, chunk: Chunk, what: str) -> Chunk:
        check_chunk(chunk, what)
        if chunk.rank != self.src_rank:
            fail(
                f"{what} is on rank {chunk.rank}, but {self._describe()} runs on rank {self.src_rank}:"
                f" it must be a chunk of rank {self.src_rank}"
            )
        return chunk

    def _remote(self, chunk: Chunk, what: str) -> ir.ChunkRef:
        check_chunk(chunk, what)
        if chunk.rank != self.dst_rank:
            fail(f"{what} is on rank {chunk.rank}, but {self._describe()} reaches rank {self.dst_rank}")
        return ir.ChunkRef(chunk.buffer.value, chunk.index, chunk.size, self.channel_id)

    def _sync(self, name: str, tb: int, data_sync: SyncType, relaxed: bool = False, publish: bool = False) -> None:
        self._use()
        if not isinstance(relaxed, bool):
            fail(f"relaxed must be True or False, got {relaxed!r}")
        if not isinstance(publish, bool):
            fail(f"publish must be True or False, got {publish!r}")
        op = ir.Op(name, channels=[self.channel_id], data_sync=sync_name(data_sync), relaxed=relaxed, publish=publish)
        record(self.src_rank, tb, None, op)

    def _send(self, name: str, dst_chunk: Chunk, src_chunk: Chunk, tb, tb_group) -> None:
        self._use()
        packet = "packet" in name
        dst = self._remote(dst_chunk, "dst_chunk")
        src = self._local(src_chunk, "src_chunk")
        check_same_size([("src_chunk", src_chunk), ("dst_chunk", dst_chunk)])
        if packet:
            check_protocol_ll(name + "s")
            check_scratch(dst_chunk, "dst_chunk", name + "s")
            if name == "read_put_packet":
                check_scratch(src_chunk, "src_chunk", name + "s")
        record(self.src_rank, tb, tb_group, ir.Op(name, src=local_ref(src), dsts=[dst]))

    def signal(
        self, tb: int, data_sync: SyncType = SyncType.both, relaxed: bool = False, publish: bool = False
    ) -> None:
        """Tell the peer that this thread block's earlier writes through the channel have landed. With
        ``publish`` (all-to-all-v plans), first write this rank's receive entry from the peer (its offset
        and bytes in this call's table) into the peer's mailbox: the peer's puts into this rank's output
        read it there, so they must wait for this signal."""
        if publish and get_program().collective.name != "alltoallv":
            fail("signal(publish=True) is for alltoallv programs, whose outputs are sized per call")
        self._sync("signal", tb, data_sync, relaxed, publish)

    def wait(self, tb: int, data_sync: SyncType = SyncType.both, relaxed: bool = False) -> None:
        """Wait for one signal from the peer."""
        self._sync("wait", tb, data_sync, relaxed)

    def put(
        self, dst_chunk: Chunk, src_chunk: Chunk, tb: int | None = None, tb_group: ThreadBlockGroup | None = None
    ) -> None:
        """Write the local src chunk into the peer's dst chunk."""
        self._send("put", dst_chunk, src_chunk, tb, tb_group)

    def put_packets(
        self, dst_chunk: Chunk, src_chunk: Chunk, tb: int | None = None, tb_group: ThreadBlockGroup | None = None
    ) -> None:
        """Write the local src chunk as LL packets into the peer's scratch chunk dst."""
        self._send("put_packet", dst_chunk, src_chunk, tb, tb_group)

    def read_put_packets(
        self, dst_chunk: Chunk, src_chunk: Chunk, tb: int | None = None, tb_group: ThreadBlockGroup | None = None
    ) -> None:
        """Forward packets already in the local scratch chunk src to the peer's scratch chunk dst."""
        self._send("read_put_packet", dst_chunk, src_chunk, tb, tb_group)


class MemoryChannel(_PeerChannel):
    """The GPU's own threads load and store the peer's memory (NVLink or PCIe peer access)."""

    channel_type = ChannelType.memory

    def get(
        self, dst_chunk: Chunk, src_chunk: Chunk, tb: int | None = None, tb_group: ThreadBlockGroup | None = None
    ) -> None:
        """Read the peer's src chunk into the local dst chunk."""
        self._use()
        src = self._remote(src_chunk, "src_chunk")
        dst = self._local(dst_chunk, "dst_chunk")
        check_same_size([("src_chunk", src_chunk), ("dst_chunk", dst_chunk)])
        record(self.src_rank, tb, tb_group, ir.Op("get", src=src, dst=local_ref(dst)))

    def reduce(
        self,
        local_src_chunk: Chunk,
        remote_src_chunks: list[Chunk],
        tb: int | None = None,
        tb_group: ThreadBlockGroup | None = None,
        local_dst_chunk: Chunk | None = None,
        reduce_op: ReduceOperationType = ReduceOperationType.sum,
    ) -> None:
        """local dst = local src (op) the peer's remote_src_chunks...; dst defaults to src."""
        self._use()
        src = self._local(local_src_chunk, "local_src_chunk")
        dst = self._local(src if local_dst_chunk is None else local_dst_chunk, "local_dst_chunk")
        if not isinstance(remote_src_chunks, (list, tuple)) or not remote_src_chunks:
            fail("remote_src_chunks must be a non-empty list of the peer's chunks")
        remotes = [self._remote(chunk, f"remote_src_chunks[{i}]") for i, chunk in enumerate(remote_src_chunks)]
        named = [("local_src_chunk", src), ("local_dst_chunk", dst)]
        named += [(f"remote_src_chunks[{i}]", chunk) for i, chunk in enumerate(remote_src_chunks)]
        check_same_size(named)
        op = ir.Op("read_reduce", srcs=[local_ref(src)] + remotes, dst=local_ref(dst), reduce_op=reduce_name(reduce_op))
        record(self.src_rank, tb, tb_group, op)


class PortChannel(_PeerChannel):
    """The GPU posts requests; a CPU proxy moves the data (RDMA across nodes, copy engine within one)."""

    channel_type = ChannelType.port

    def flush(self, tb: int, data_sync: SyncType = SyncType.both) -> None:
        """Wait until the proxy has completed every transfer posted on this channel."""
        self._sync("flush", tb, data_sync)

    def put_packets(
        self, dst_chunk: Chunk, src_chunk: Chunk, tb: int | None = None, tb_group: ThreadBlockGroup | None = None
    ) -> None:
        """Write the local src chunk as LL packets into the peer's scratch chunk dst. A src in scratch
        is taken to hold packets already (packed by ``copy_packets`` or received), which are forwarded
        as they are (``read_put_packets``): what MSCCL++'s port channel does with it, so its programs
        that pack locally and then send the packed scratch port unchanged."""
        if isinstance(src_chunk, Chunk) and src_chunk.buffer == BufferType.scratch:
            self._send("read_put_packet", dst_chunk, src_chunk, tb, tb_group)
        else:
            self._send("put_packet", dst_chunk, src_chunk, tb, tb_group)

    def put_with_signal(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int) -> None:
        """put, then signal the peer, as one request."""
        self._send("put_with_signal", dst_chunk, src_chunk, tb, None)

    def put_with_signal_and_flush(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int) -> None:
        """put, signal, then flush, as one request."""
        self._send("put_with_signal_and_flush", dst_chunk, src_chunk, tb, None)

    def get(self, *args, **kwargs) -> None:
        fail("get needs a MemoryChannel: a port channel only writes to its peer (put)")

    def reduce(self, *args, **kwargs) -> None:
        fail("reduce over a channel (read_reduce) needs a MemoryChannel: a port channel cannot read the peer's memory")


class SwitchChannel(NumberedPerProgram):
    """NVLink SHARP multicast over ``rank_list``, bound to one buffer type (opt-in at run time)."""

    def __init__(self, rank_list: list[int], buffer_type: BufferType) -> None:
        program = get_program()
        ranks = list(rank_list) if isinstance(rank_list, (list, tuple)) else fail("rank_list must be a list of ranks")
        if len(ranks) < 2 or len(set(ranks)) != len(ranks):
            fail(f"a SwitchChannel needs at least two distinct ranks, got {ranks}")
        for rank in ranks:
            program.check_rank(rank)
        if not isinstance(buffer_type, BufferType):
            fail(f"buffer_type must be a BufferType, got {buffer_type!r}")
        self.rank_list = ranks
        self.buffer_type = buffer_type
        self.channel_type = ChannelType.switch
        self._program = program
        self.channel_ids = {
            rank: program.add_channel(rank, ir.Channel(0, "switch", ranks=sorted(ranks), buffer=buffer_type.value))
            for rank in ranks
        }

    def _multicast_ref(self, rank: int, buffer_offset: int, size: int) -> ir.ChunkRef:
        if get_program() is not self._program:
            fail("this SwitchChannel was not declared in this CollectiveProgram")
        if rank not in self.channel_ids:
            fail(f"rank {rank} is not in this SwitchChannel's group {self.rank_list}")
        if not isinstance(buffer_offset, int) or not isinstance(size, int) or buffer_offset < 0 or size < 1:
            fail(f"buffer_offset must be >= 0 and size >= 1, got {buffer_offset!r} and {size!r}")
        for member in self.rank_list:
            limit = self._program.gpu(member).chunks(self.buffer_type.value)
            if buffer_offset + size > limit:
                fail(
                    f"chunks {buffer_offset} to {buffer_offset + size - 1} are out of range:"
                    f" rank {member}'s {self.buffer_type} buffer has {limit} chunks"
                )
        return ir.ChunkRef(self.buffer_type.value, buffer_offset, size, self.channel_ids[rank])

    def _own(self, rank: int, chunk: Chunk, what: str, size: int) -> Chunk:
        check_chunk(chunk, what)
        if chunk.rank != rank:
            fail(f"{what} is on rank {chunk.rank}, but the op runs on rank {rank}")
        if chunk.size != size:
            fail(f"{what} has {chunk.size} chunks but size is {size}")
        return chunk

    def reduce(
        self, rank: int, buffer_offset: int, size: int, dst_chunk: Chunk, tb: int, reduce_op=ReduceOperationType.sum
    ) -> None:
        """On ``rank``: dst = reduction over the group of multicast chunks [buffer_offset, buffer_offset + size)."""
        src = self._multicast_ref(rank, buffer_offset, size)
        dst = self._own(rank, dst_chunk, "dst_chunk", size)
        record(rank, tb, None, ir.Op("multimem_reduce", src=src, dst=local_ref(dst), reduce_op=reduce_name(reduce_op)))

    def broadcast(self, rank: int, src_chunk: Chunk, buffer_offset: int, size: int, tb: int) -> None:
        """On ``rank``: write src to multicast chunks [buffer_offset, buffer_offset + size) of every member."""
        dst = self._multicast_ref(rank, buffer_offset, size)
        src = self._own(rank, src_chunk, "src_chunk", size)
        record(rank, tb, None, ir.Op("multimem_broadcast", src=local_ref(src), dsts=[dst]))

    def broadcast_packets(self, *args, **kwargs) -> None:
        fail("broadcast_packets is not in Loom's plan format v1: multicast ops carry plain data; use broadcast")

    def at_rank(self, rank: int) -> SwitchChannel.SwitchChannelRankView:
        if rank not in self.channel_ids:
            fail(f"rank {rank} is not in this SwitchChannel's group {self.rank_list}")
        return SwitchChannel.SwitchChannelRankView(self, rank)

    class SwitchChannelRankView:
        """The switch channel as seen from one rank of its group."""

        def __init__(self, channel: SwitchChannel, rank: int) -> None:
            self._channel = channel
            self._rank = rank

        def reduce(
            self, buffer_offset: int, size: int, dst_chunk: Chunk, tb: int, reduce_op=ReduceOperationType.sum
        ) -> None:
            self._channel.reduce(self._rank, buffer_offset, size, dst_chunk, tb, reduce_op)

        def broadcast(self, src_chunk: Chunk, buffer_offset: int, size: int, tb: int) -> None:
            self._channel.broadcast(self._rank, src_chunk, buffer_offset, size, tb)

        def broadcast_packets(self, *args, **kwargs) -> None:
            self._channel.broadcast_packets()


__all__ = [
    "BufferType",
    "ChannelType",
    "MemoryChannel",
    "PortChannel",
    "ReduceOperationType",
    "SwitchChannel",
    "SyncType",
    "ThreadBlockGroup",
]
