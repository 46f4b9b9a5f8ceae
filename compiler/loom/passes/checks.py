"""Checks on the recorded program that catch what would otherwise surface as a wrong result or a
hang: output chunks nothing writes, and signals without a matching wait (or the reverse)."""

from __future__ import annotations

from collections import Counter

from loom.errors import DSLError
from loom.ir import model as ir
from loom.language.collectives import Collective


def _flat(ops: list[ir.Op], times: int = 1):
    for op in ops:
        if op.op == "pipeline":
            yield from _flat(op.body, times * (op.iterations or 1))
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


def check_output_written(plan: ir.Plan, collective: Collective) -> None:
    written = written_chunks(plan)
    for gpu in plan.gpus:
        for index in range(gpu.output_chunks):
            if ("output", index) in written[gpu.id]:
                continue
            if plan.inplace and (("input", index) in written[gpu.id] or index in collective.inplace_prefilled(gpu.id)):
                continue
            if plan.inplace and collective.name == "allreduce":
                continue  # in place, the input already is the output; the reduction may write either name
            raise DSLError(
                f"the {collective.name} can never be complete: no op writes output chunk {index} of rank {gpu.id}"
                f" (its output buffer has {gpu.output_chunks} chunks)"
            )


def check_signal_wait_pairs(plan: ir.Plan) -> None:
    """Every signal rank a sends to rank b is consumed by one wait of b on its channel to a."""
    signals: Counter = Counter()
    waits: Counter = Counter()
    first_loc: dict = {}
    for gpu in plan.gpus:
        for tb in gpu.threadblocks:
            for op, times in _flat(tb.ops):
                sends = op.op in ("signal", "put_with_signal", "put_with_signal_and_flush")
                if not sends and op.op != "wait":
                    continue
                ids = op.channels or sorted({ref.channel for ref in op.dsts})
                for channel_id in ids:
                    channel = gpu.channel(channel_id)
                    key = (gpu.id, channel.peer, channel.type) if sends else (channel.peer, gpu.id, channel.type)
                    (signals if sends else waits)[key] += times
                    first_loc.setdefault((key, sends), op.loc)
    for key in sorted(set(signals) | set(waits)):
        sent, awaited = signals[key], waits[key]
        if sent != awaited:
            source, target, kind = key
            loc = first_loc.get((key, sent > awaited))
            raise DSLError(
                f"rank {source} signals rank {target} {sent} time(s) over {kind} channels, but rank {target} waits"
                f" {awaited} time(s) for rank {source}: every signal needs exactly one wait, or a wait hangs",
                loc,
            )
