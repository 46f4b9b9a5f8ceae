"""Checks on the recorded program that catch what would otherwise surface as a wrong result or a
hang: output chunks nothing writes, and signals without a matching wait (or the reverse)."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

from loom.errors import DSLError
from loom.ir import model as ir
from loom.ir.shapes import inplace_alias
from loom.language.collectives import Collective


def _flat(ops: list[ir.Op], times: int = 1, unit_chunks: Fraction = Fraction(1)):
    """Each op with how often it runs in a call; a pipeline sized in bytes runs as often as its
    longest range needs units of ``unit_chunks`` chunks."""
    for op in ops:
        if op.op == "pipeline" and op.unit_bytes is not None:
            longest = max(op.longest_range(), 1)
            yield from _flat(op.body, times * math.ceil(longest / unit_chunks), unit_chunks)
        elif op.op == "pipeline":
            yield from _flat(op.body, times * op.iterations, unit_chunks)
        else:
            yield op, times


def written_chunks(plan: ir.Plan) -> dict[int, set[tuple[str, int]]]:
    """rank -> {(buffer, chunk)} that some op writes (locally or through a channel)."""
    written: dict[int, set[tuple[str, int]]] = {gpu.id: set() for gpu in plan.gpus}
    for gpu in plan.gpus:
        for tb in gpu.threadblocks:
            for op, _ in _flat(tb.ops):
                for ref in op.local_writes():
                    written[gpu.id].update((ref.buffer, i) for i in range(ref.index, ref.stop))
                for ref in op.dsts:
                    channel = gpu.channel(ref.channel)
                    targets = channel.ranks if channel.type == "switch" else [channel.peer]
                    for target in targets:
                        written[target].update((ref.buffer, i) for i in range(ref.index, ref.stop))
    return written


def _aliased_written(plan: ir.Plan, gpu: ir.Gpu, index: int, written: set[tuple[str, int]]) -> bool:
    """In place: output chunk `index` is written when a write lands on its other name."""
    alias = inplace_alias(plan.collective, gpu.id, gpu.input_chunks, gpu.output_chunks, "output", index)
    if alias in written:
        return True
    return any(
        inplace_alias(plan.collective, gpu.id, gpu.input_chunks, gpu.output_chunks, buffer, i) == alias
        for buffer, i in written
        if buffer == "input"
    )


def check_output_written(plan: ir.Plan, collective: Collective) -> None:
    if not collective.has_postcondition:
        return  # a TestCollective: nothing says which output chunks must be written
    written = written_chunks(plan)
    for gpu in plan.gpus:
        if not collective.has_output(gpu.id):
            continue  # a reduce's non-root ranks: their output is not part of the result
        for index in range(gpu.output_chunks):
            if ("output", index) in written[gpu.id]:
                continue
            if plan.inplace and index in collective.inplace_prefilled(gpu.id):
                continue
            if plan.inplace and _aliased_written(plan, gpu, index, written[gpu.id]):
                continue
            raise DSLError(
                f"the {collective.name} can never be complete: no op writes output chunk {index} of rank {gpu.id}"
                f" (its output buffer has {gpu.output_chunks} chunks)"
            )


def _pair_positions(gpu: ir.Gpu) -> dict[int, int]:
    """channel id -> its position among this rank's channels of the same type to the same peer:
    the i-th channel a rank declares to a peer pairs with the peer's i-th channel back."""
    seen: Counter = Counter()
    positions = {}
    for channel in sorted(gpu.channels, key=lambda c: c.id):
        if channel.type != "switch":
            positions[channel.id] = seen[(channel.peer, channel.type)]
            seen[(channel.peer, channel.type)] += 1
    return positions


def check_signal_wait_pairs(plan: ir.Plan) -> None:
    """Every signal rank a sends on a channel to rank b is consumed by one wait of b on the paired
    channel back to a (the i-th of each side's channels of that type to the other)."""
    # The iterations of pipelines sized in bytes follow the message size: the counts must agree at
    # every size, so they are compared at several.
    for unit_chunks in ir.SAMPLED_UNIT_CHUNKS:
        _check_signal_wait_counts(plan, unit_chunks)


def _check_signal_wait_counts(plan: ir.Plan, unit_chunks: Fraction) -> None:
    signals: Counter = Counter()
    waits: Counter = Counter()
    first_loc: dict = {}
    for gpu in plan.gpus:
        positions = _pair_positions(gpu)
        for tb in gpu.threadblocks:
            for op, times in _flat(tb.ops, unit_chunks=unit_chunks):
                sends = op.op in ("signal", "put_with_signal", "put_with_signal_and_flush")
                if not sends and op.op != "wait":
                    continue
                ids = op.channels or sorted({ref.channel for ref in op.dsts})
                for channel_id in ids:
                    channel = gpu.channel(channel_id)
                    pair = (channel.type, positions[channel_id])
                    key = (gpu.id, channel.peer, *pair) if sends else (channel.peer, gpu.id, *pair)
                    (signals if sends else waits)[key] += times
                    first_loc.setdefault((key, sends), op.loc)
    for key in sorted(set(signals) | set(waits)):
        sent, awaited = signals[key], waits[key]
        if sent != awaited:
            source, target, kind, position = key
            loc = first_loc.get((key, sent > awaited))
            raise DSLError(
                f"rank {source} signals rank {target} {sent} time(s) on its {_ordinal(position)} {kind} channel to"
                f" rank {target}, but rank {target} waits {awaited} time(s) on its {_ordinal(position)} {kind} channel"
                f" back: every signal needs exactly one wait on the paired channel, or a wait hangs",
                loc,
            )


def check_waits_in_one_thread_block(plan: ir.Plan) -> None:
    """All waits on one channel must be in one thread block: a wait raises the channel's expected
    signal count, which the executor keeps in the one thread block that waits (it refuses a plan
    that waits on a channel from two). Runs on the final plan, after thread-block groups and
    instances are laid out."""
    for gpu in plan.gpus:
        waiter: dict[int, int] = {}
        for tb in gpu.threadblocks:
            for op, _ in _flat(tb.ops):
                if op.op != "wait":
                    continue
                for channel_id in op.channels:
                    first = waiter.setdefault(channel_id, tb.id)
                    if first != tb.id:
                        channel = gpu.channel(channel_id)
                        raise DSLError(
                            f"rank {gpu.id} waits on one {channel.type} channel to rank {channel.peer} in thread"
                            f" blocks {first} and {tb.id}: a channel's waits must all be in one thread block, so"
                            f" give the second thread block a channel of its own (declare another"
                            f" {'MemoryChannel' if channel.type == 'memory' else 'PortChannel'}({channel.peer},"
                            f" {gpu.id}), and its peer one back)",
                            op.loc,
                        )


def _ordinal(position: int) -> str:
    return {0: "first", 1: "second", 2: "third"}.get(position, f"#{position + 1}")
