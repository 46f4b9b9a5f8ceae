"""The compiler's intermediate representation: a plan (format v1) as dataclasses.

The IR mirrors the plan JSON one to one, so a plan file, its assembly text and the IR convert into
each other without loss; passes are functions from IR to IR. Two fields exist only in the IR:
`Op.seq` (the op's position in the DSL trace, which orders ops of different thread blocks) and
`Op.auto` (set on syncs the compiler inserted, which fusion may drop again), and `Op.tb_group` (the
op's share of a thread-block group, until the lowering pass turns it into a chunk range).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction

BUFFERS = ("input", "output", "scratch")
CHANNEL_TYPES = ("memory", "port", "switch")
REDUCE_OPS = ("sum", "min", "max")
DATA_SYNCS = ("none", "before", "after", "both")


# A pipeline sized in bytes (unit_bytes) cuts its ranges differently at every message size; the
# compiler's checks and the verifier try units of these many chunks: several iterations per chunk,
# one, and units that straddle chunk boundaries.
SAMPLED_UNIT_CHUNKS = (Fraction(1, 2), Fraction(1), Fraction(3, 2))


@dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class ChunkRef:
    """Chunks [index, index + count) of a buffer; through `channel` when it is remote."""

    buffer: str
    index: int
    count: int = 1
    channel: int | None = None

    @property
    def stop(self) -> int:
        return self.index + self.count

    @property
    def is_remote(self) -> bool:
        return self.channel is not None

    def with_range(self, index: int, count: int) -> ChunkRef:
        return dataclasses.replace(self, index=index, count=count)


@dataclass
class Op:
    op: str
    src: ChunkRef | None = None
    srcs: list[ChunkRef] = field(default_factory=list)
    dst: ChunkRef | None = None
    packet_dst: ChunkRef | None = None
    dsts: list[ChunkRef] = field(default_factory=list)
    channels: list[int] = field(default_factory=list)
    reduce_op: str | None = None
    relaxed: bool = False
    publish: bool = False  # signal: this rank's receive entries go to the peers' mailboxes first (alltoallv)
    data_sync: str = "both"
    barrier_id: int | None = None
    threadblocks: list[int] = field(default_factory=list)
    semaphores: list[int] = field(default_factory=list)
    iterations: int | None = None  # pipeline of a fixed number of equal slices
    unit_bytes: int | None = None  # pipeline of slices of this many bytes (MSCCL++'s unit)
    body: list[Op] = field(default_factory=list)
    loc: SourceLoc | None = None
    seq: int = 0
    auto: bool = False
    tb_group: tuple[int, int] | None = None  # (member index, group size) until thread-block groups are lowered

    def longest_range(self) -> int:
        """A pipeline's longest chunk range (0 without any): what one sized in bytes counts its
        iterations from."""
        return max((ref.count for inner in self.body for ref in inner.refs()), default=0)

    def refs(self) -> list[ChunkRef]:
        """Every chunk range the op names, sources first."""
        out = [self.src] if self.src else []
        out += self.srcs
        out += [ref for ref in (self.dst, self.packet_dst) if ref]
        return out + self.dsts

    def local_reads(self) -> list[ChunkRef]:
        return [ref for ref in ([self.src] if self.src else []) + self.srcs if not ref.is_remote]

    def local_writes(self) -> list[ChunkRef]:
        return [ref for ref in (self.dst, self.packet_dst) if ref and not ref.is_remote]

    def map_refs(self, fn) -> Op:
        """A copy with every chunk reference (pipeline bodies included) replaced by fn(ref)."""
        return dataclasses.replace(
            self,
            src=fn(self.src) if self.src else None,
            srcs=[fn(ref) for ref in self.srcs],
            dst=fn(self.dst) if self.dst else None,
            packet_dst=fn(self.packet_dst) if self.packet_dst else None,
            dsts=[fn(ref) for ref in self.dsts],
            body=[inner.map_refs(fn) for inner in self.body],
        )


@dataclass
class Channel:
    id: int
    type: str
    peer: int | None = None
    ranks: list[int] = field(default_factory=list)
    buffer: str | None = None


@dataclass
class Semaphore:
    id: int
    initial_value: int = 0


@dataclass
class ThreadBlock:
    id: int
    ops: list[Op] = field(default_factory=list)


@dataclass
class Gpu:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int = 0
    channels: list[Channel] = field(default_factory=list)
    semaphores: list[Semaphore] = field(default_factory=list)
    threadblocks: list[ThreadBlock] = field(default_factory=list)

    def chunks(self, buffer: str) -> int:
        return {"input": self.input_chunks, "output": self.output_chunks, "scratch": self.scratch_chunks}[buffer]

    def channel(self, channel_id: int) -> Channel | None:
        return next((c for c in self.channels if c.id == channel_id), None)

    def threadblock(self, tb_id: int) -> ThreadBlock:
        """The thread block with this id, created (in id order) when it does not exist yet."""
        for tb in self.threadblocks:
            if tb.id == tb_id:
                return tb
        tb = ThreadBlock(tb_id)
        self.threadblocks.append(tb)
        self.threadblocks.sort(key=lambda t: t.id)
        return tb


@dataclass
class Plan:
    name: str
    collective: str
    protocol: str
    world_size: int
    ranks_per_node: int
    inplace: bool = False
    threads_per_block: int = 1024
    min_message_bytes: int = 0
    max_message_bytes: int = (1 << 53) - 1
    alignment_bytes: int = 16
    reuse_scratch: bool = False
    root: int | None = None
    metadata: dict = field(default_factory=dict)
    gpus: list[Gpu] = field(default_factory=list)

    def gpu(self, rank: int) -> Gpu:
        return next(g for g in self.gpus if g.id == rank)

    def all_ops(self):
        """(gpu, threadblock, op) for every top-level op."""
        for gpu in self.gpus:
            for tb in gpu.threadblocks:
                for op in tb.ops:
                    yield gpu, tb, op
