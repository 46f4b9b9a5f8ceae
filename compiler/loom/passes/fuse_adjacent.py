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
from loom.ir.shapes import inplace_alias

# rule(gpu, first, second): the fused op, or None when the two do not fuse.
Rule = Callable[[ir.Gpu, ir.Op, ir.Op], "ir.Op | None"]

# The ops that synchronise the threads of a block (as in the dependency pass), unless data_sync is none.
_THREAD_SYNC_OPS = frozenset({"nop", "barrier", "signal", "wait", "flush", "sem_acquire", "sem_release"})

Chunk = tuple[object, str, int]
# A chunk range's chunks in order, each under its one name (an in-place plan's input and output alias).
Names = Callable[[ir.ChunkRef], list[Chunk]]


def fuse_adjacent(plan: ir.Plan, rule: Rule, pair_writes_fused: bool = False) -> ir.Plan:
    """Apply rule to every pair of adjacent ops of every thread block, pipeline bodies included.

    A fused op is tried again with the op after it, so chains (put + put + put) fold into one op.
    ``pair_writes_fused``: the second op may also write what the first reads or writes, provided
    each such overlap is the very same range on both sides: the fused op handles every element in one
    thread, which reads it and then writes it (a reduction chain accumulating into one chunk, a
    read-reduce that sends its result back over the chunks it read). Shifted overlaps keep the nop.
    """
    for gpu in plan.gpus:
        names = chunk_names(plan, gpu)
        for tb in gpu.threadblocks:
            tb.ops = _fuse_ops(gpu, names, tb.ops, rule, pair_writes_fused)
    return plan


def chunk_names(plan: ir.Plan, gpu: ir.Gpu) -> Names:
    """Each chunk as (whose buffer, buffer, index): the rank's own (under its in-place name) or a peer's."""

    def names(ref: ir.ChunkRef) -> list[Chunk]:
        if not ref.is_remote:
            if plan.inplace:
                alias = [
                    inplace_alias(plan.collective, gpu.id, gpu.input_chunks, gpu.output_chunks, ref.buffer, i)
                    for i in range(ref.index, ref.stop)
                ]
                return [("own", buffer, index) for buffer, index in alias]
            return [("own", ref.buffer, i) for i in range(ref.index, ref.stop)]
        channel = gpu.channel(ref.channel)
        # Two channels to one peer reach the same buffers; a switch channel's group is its own.
        owner: object = channel.peer if channel is not None and channel.type != "switch" else f"channel {ref.channel}"
        return [(owner, ref.buffer, i) for i in range(ref.index, ref.stop)]

    return names


def channel_type(gpu: ir.Gpu, ref_or_id: ir.ChunkRef | int) -> str | None:
    """The type of the channel a remote reference (or a channel id) goes through; None if undeclared."""
    channel_id = ref_or_id.channel if isinstance(ref_or_id, ir.ChunkRef) else ref_or_id
    channel = gpu.channel(channel_id) if channel_id is not None else None
    return channel.type if channel is not None else None


def _fuse_ops(gpu: ir.Gpu, names: Names, ops: list[ir.Op], rule: Rule, pair_writes_fused: bool) -> list[ir.Op]:
    ops = [
        dataclasses.replace(op, body=_fuse_ops(gpu, names, op.body, rule, pair_writes_fused))
        if op.op == "pipeline"
        else op
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
        removable = second == position + 1 or _nops_removable(names, ops, position, second, pair_writes_fused)
        if fused is not None and removable:
            ops[position : second + 1] = [fused]
        elif fused is not None and _nops_stay_after(names, ops, position, second, pair_writes_fused):
            ops[position : second + 1] = [fused, *ops[position + 1 : second]]
        else:
            position += 1
    return ops


def _is_auto_nop(op: ir.Op) -> bool:
    return op.op == "nop" and op.auto


def _syncs_threads(op: ir.Op) -> bool:
    return op.op in _THREAD_SYNC_OPS and op.data_sync != "none"


def _access(names: Names, op: ir.Op) -> tuple[set[Chunk], set[Chunk]]:
    """(reads, writes) of the op, pipeline bodies included, peers' chunks too."""
    reads = {c for ref in ([op.src] if op.src else []) + op.srcs for c in names(ref)}
    writes = {c for ref in [r for r in (op.dst, op.packet_dst) if r] + op.dsts for c in names(ref)}
    for inner in op.body:
        inner_reads, inner_writes = _access(names, inner)
        reads |= inner_reads
        writes |= inner_writes
    return reads, writes


def _nops_removable(names: Names, ops: list[ir.Op], first: int, second: int, pair_writes_fused: bool) -> bool:
    """Whether the auto nops between ops[first] and ops[second] order nothing but the fused pair's data flow."""
    start = first
    while start > 0 and not _syncs_threads(ops[start - 1]):
        start -= 1
    stop = second + 1
    while stop < len(ops) and not _syncs_threads(ops[stop]):
        stop += 1
    earlier = [_access(names, op) for op in ops[start : first + 1]]
    later = [_access(names, op) for op in ops[second:stop]]
    for p, (reads_p, writes_p) in enumerate(earlier):
        for q, (reads_q, writes_q) in enumerate(later):
            fused_pair = p == len(earlier) - 1 and q == 0
            if fused_pair and pair_writes_fused:
                if not _overlaps_aligned(names, ops[first], ops[second]):
                    return False
                continue
            if writes_p & writes_q or reads_p & writes_q or (writes_p & reads_q and not fused_pair):
                return False
    return True


def _nops_stay_after(names: Names, ops: list[ir.Op], first: int, second: int, pair_writes_fused: bool) -> bool:
    """Whether the auto nops between ops[first] and ops[second] may follow the fused op: the pair fuses
    (as in _nops_removable) and no op since the previous thread sync conflicts with ops[second]."""
    start = first
    while start > 0 and not _syncs_threads(ops[start - 1]):
        start -= 1
    reads_q, writes_q = _access(names, ops[second])
    reads_p, writes_p = _access(names, ops[first])
    if pair_writes_fused:
        if not _overlaps_aligned(names, ops[first], ops[second]):
            return False
    elif writes_p & writes_q or reads_p & writes_q:
        return False
    for op in ops[start:first]:
        reads_p, writes_p = _access(names, op)
        if writes_p & writes_q or reads_p & writes_q or writes_p & reads_q:
            return False
    return True


def _overlaps_aligned(names: Names, first: ir.Op, second: ir.Op) -> bool:
    """Whether every range the second op writes that overlaps one the first reads or writes is that
    same range (element i of one is element i of the other)."""
    earlier = [names(ref) for ref in ([first.src] if first.src else []) + first.srcs]
    earlier += [names(ref) for ref in [r for r in (first.dst, first.packet_dst) if r] + first.dsts]
    written = [names(ref) for ref in [r for r in (second.dst, second.packet_dst) if r] + second.dsts]
    for a in earlier:
        for b in written:
            if set(a) & set(b) and a != b:
                return False
    return True
