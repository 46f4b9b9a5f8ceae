"""What every fusion pass shares: walk each thread block, find two adjacent ops that a rule merges,
and put the fused op in their place. Not a pass itself; each ``fuse_<name>`` module is one rule.

Adjacent means: nothing but auto ``nop``s (ones the dependency pass inserted) lies between the two
ops, and both are in the same op list: a thread block's top level or one pipeline body. A pipeline
op itself never fuses, so nothing fuses across a pipeline boundary. Any other op in between (a
semaphore op, a barrier, a sync the author wrote, a nop the author wrote) keeps the two apart.

An auto nop between the two is dropped with them when the fused op makes it redundant: it orders
every op since the previous thread sync before every op up to the next one, so it may go only when
no such pair of ops conflicts (write/write, read/write or write/read of one chunk, the rank's own or
a peer's through a channel), except the pair being fused where the second reads what the first
wrote: the fused op does both in one pass over the data. When anything else still needs the nop,
the two ops stay as they are, unless the nop may stay after the fused op instead: it then still orders
the first op, and everything before the pair, against what follows; only the second op moves before
it, so no op since the previous thread sync may conflict with the second (MSCCL++'s naive all-reduce:
packet puts of other chunks, a reduction, a nop the later unpacks need, the put of its result).

The fused op is built by the rule, normally as ``dataclasses.replace(first, ...)``, so it keeps the
first op's ``loc`` (its DSL line), ``seq`` and ``auto``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from loom.ir import model as ir

# rule(gpu, first, second): the fused op, or None when the two do not fuse.
Rule = Callable[[ir.Gpu, ir.Op, ir.Op], "ir.Op | None"]

# The ops that synchronise the threads of a block (as in the dependency pass), unless data_sync is none.
_THREAD_SYNC_OPS = frozenset({"nop", "barrier", "signal", "wait", "flush", "sem_acquire", "sem_release"})

Chunk = tuple[object, str, int]


def fuse_adjacent(plan: ir.Plan, rule: Rule, pair_writes_fused: bool = False) -> ir.Plan:
    """Apply rule to every pair of adjacent ops of every thread block, pipeline bodies included.

    A fused op is tried again with the op after it, so chains (put + put + put) fold into one op.
    ``pair_writes_fused``: the second op may also write what the first reads or writes, provided
    each such overlap is the very same range on both sides: the fused op handles every element in one
    thread, which reads it and then writes it (a reduction chain accumulating into one chunk, a
    read-reduce that sends its result back over the chunks it read). Shifted overlaps keep the nop.
    """
    for gpu in plan.gpus:
        for tb in gpu.threadblocks:
            tb.ops = _fuse_ops(gpu, tb.ops, rule, pair_writes_fused)
    return plan


def channel_type(gpu: ir.Gpu, ref_or_id: ir.ChunkRef | int) -> str | None:
    """The type of the channel a remote reference (or a channel id) goes through; None if undeclared."""
    channel_id = ref_or_id.channel if isinstance(ref_or_id, ir.ChunkRef) else ref_or_id
    channel = gpu.channel(channel_id) if channel_id is not None else None
    return channel.type if channel is not None else None


def _fuse_ops(gpu: ir.Gpu, ops: list[ir.Op], rule: Rule, pair_writes_fused: bool) -> list[ir.Op]:
    ops = [
        dataclasses.replace(op, body=_fuse_ops(gpu, op.body, rule, pair_writes_fused)) if op.op == "pipeline" else op
        for op in ops
    ]
    position = 0
    while position < len(ops):
        first = ops[position]
        second = position + 1
        while second < len(ops) and _is_auto_nop(ops[second]):
            second += 1
        fused = None
        if second < len(ops) and "pipeline" not in (first.op, ops[second].op):
            fused = rule(gpu, first, ops[second])
        removable = second == position + 1 or _nops_removable(gpu, ops, position, second, pair_writes_fused)
        if fused is not None and removable:
            ops[position : second + 1] = [fused]
        elif fused is not None and _nops_stay_after(gpu, ops, position, second, pair_writes_fused):
            ops[position : second + 1] = [fused, *ops[position + 1 : second]]
        else:
            position += 1
    return ops


def _is_auto_nop(op: ir.Op) -> bool:
    return op.op == "nop" and op.auto


def _syncs_threads(op: ir.Op) -> bool:
    return op.op in _THREAD_SYNC_OPS and op.data_sync != "none"


def _chunks(gpu: ir.Gpu, refs: list[ir.ChunkRef]) -> set[Chunk]:
    """The chunks refs name, each as (whose buffer, buffer, index): the rank's own or a peer's."""
    out: set[Chunk] = set()
    for ref in refs:
        channel = gpu.channel(ref.channel) if ref.is_remote else None
        if not ref.is_remote:
            owner: object = "own"
        elif channel is not None and channel.type != "switch":
            owner = channel.peer  # two channels to one peer reach the same buffers
        else:
            owner = f"channel {ref.channel}"
        out.update((owner, ref.buffer, i) for i in range(ref.index, ref.stop))
    return out


def _access(gpu: ir.Gpu, op: ir.Op) -> tuple[set[Chunk], set[Chunk]]:
    """(reads, writes) of the op, pipeline bodies included, peers' chunks too."""
    reads = _chunks(gpu, ([op.src] if op.src else []) + op.srcs)
    writes = _chunks(gpu, [ref for ref in (op.dst, op.packet_dst) if ref] + op.dsts)
    for inner in op.body:
        inner_reads, inner_writes = _access(gpu, inner)
        reads |= inner_reads
        writes |= inner_writes
    return reads, writes


def _nops_removable(gpu: ir.Gpu, ops: list[ir.Op], first: int, second: int, pair_writes_fused: bool) -> bool:
    """Whether the auto nops between ops[first] and ops[second] order nothing but the fused pair's data flow."""
    start = first
    while start > 0 and not _syncs_threads(ops[start - 1]):
        start -= 1
    stop = second + 1
    while stop < len(ops) and not _syncs_threads(ops[stop]):
        stop += 1
    earlier = [_access(gpu, op) for op in ops[start : first + 1]]
    later = [_access(gpu, op) for op in ops[second:stop]]
    for p, (reads_p, writes_p) in enumerate(earlier):
        for q, (reads_q, writes_q) in enumerate(later):
            fused_pair = p == len(earlier) - 1 and q == 0
            if fused_pair and pair_writes_fused:
                if not _overlaps_aligned(gpu, ops[first], ops[second]):
                    return False
                continue
            if writes_p & writes_q or reads_p & writes_q or (writes_p & reads_q and not fused_pair):
                return False
    return True


def _nops_stay_after(gpu: ir.Gpu, ops: list[ir.Op], first: int, second: int, pair_writes_fused: bool) -> bool:
    """Whether the auto nops between ops[first] and ops[second] may follow the fused op: the pair fuses
    (as in _nops_removable) and no op since the previous thread sync conflicts with ops[second]."""
    start = first
    while start > 0 and not _syncs_threads(ops[start - 1]):
        start -= 1
    reads_q, writes_q = _access(gpu, ops[second])
    reads_p, writes_p = _access(gpu, ops[first])
    if pair_writes_fused:
        if not _overlaps_aligned(gpu, ops[first], ops[second]):
            return False
    elif writes_p & writes_q or reads_p & writes_q:
        return False
    for op in ops[start:first]:
        reads_p, writes_p = _access(gpu, op)
        if writes_p & writes_q or reads_p & writes_q or writes_p & reads_q:
            return False
    return True


def _ranges(gpu: ir.Gpu, refs: list[ir.ChunkRef]) -> list[tuple[object, str, int, int]]:
    """(whose buffer, buffer, start, stop) of each ref, owners named as in _chunks."""
    return [(min(_chunks(gpu, [ref]))[0], ref.buffer, ref.index, ref.stop) for ref in refs]


def _overlaps_aligned(gpu: ir.Gpu, first: ir.Op, second: ir.Op) -> bool:
    """Whether every range the second op writes that overlaps one the first reads or writes is that
    same range (element i of one is element i of the other)."""
    earlier = _ranges(gpu, ([first.src] if first.src else []) + first.srcs)
    earlier += _ranges(gpu, [ref for ref in (first.dst, first.packet_dst) if ref] + first.dsts)
    written = _ranges(gpu, [ref for ref in (second.dst, second.packet_dst) if ref] + second.dsts)
    for a in earlier:
        for b in written:
            if a[:2] == b[:2] and a[2] < b[3] and b[2] < a[3] and a != b:
                return False
    return True
