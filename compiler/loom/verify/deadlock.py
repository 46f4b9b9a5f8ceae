"""Why the thread blocks that cannot go on are stuck, and which of them wait for each other.

When the executor can advance no thread block and some have not finished, each stuck one gets a
finding at the step it is stuck at: ``deadlock`` when it waits for signals, semaphore tokens,
barrier partners or packets that would come from thread blocks that are themselves stuck or
done (a cycle among them is spelled out), or that no op of the plan provides often enough;
``packet`` when it polls a scratch location no op writes packets to, or that holds plain data.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from loom.verify.dataflow import polled_keys
from loom.verify.program import Step
from loom.verify.report import finding_at
from loom.verify.run_state import RunState

Block = tuple[int, int]


class _Index:
    """Who signals, waits, releases and writes packets where, from the whole plan."""

    def __init__(self, executor: RunState) -> None:
        self.signallers: dict[tuple[int, int], list[Step]] = defaultdict(list)
        self.signals: Counter = Counter()  # (rank, channel) -> signals per call
        self.waits: Counter = Counter()
        self.releasers: dict[tuple[int, int], list[Step]] = defaultdict(list)
        self.packet_writers: dict[tuple, list[Step]] = defaultdict(list)
        memory = executor.memory
        for steps in executor.program.blocks.values():
            for step in steps:
                for channel in step.signals:
                    self.signallers[(step.rank, channel)].append(step)
                    self.signals[(step.rank, channel)] += 1
                for channel in step.waits:
                    self.waits[(step.rank, channel)] += 1
                for semaphore in step.releases:
                    self.releasers[(step.rank, semaphore)].append(step)
                for ref, packet in step.writes:
                    if packet:
                        for offset in range(ref.count):
                            self.packet_writers[memory.key(ref, offset, 0)[:3]].append(step)


def explain(executor: RunState) -> None:
    index = _Index(executor)
    stuck: dict[Block, Step] = {}
    for block in executor.program.blocks:
        step = executor.blocked_step(block)
        if step is not None:
            stuck[block] = step
    reasons: dict[Block, tuple[str, str, set[Block]]] = {}
    for block, step in stuck.items():
        reasons[block] = _why(executor, index, step)
    for block, step in stuck.items():
        category, message, _ = reasons[block]
        cycle = _cycle(block, {b: r[2] & stuck.keys() for b, r in reasons.items()})
        if cycle:
            message += "; cyclic wait: " + " -> ".join(f"rank {r} tb {t}" for r, t in cycle)
        executor.log.add(finding_at(step, category, message, executor.call[block[0]]))


def _state(executor: RunState, block: Block) -> str:
    """What thread block ``block`` is doing now: ``is blocked at op 3 (wait ch0)``, ..."""
    rank, tb = block
    if block not in executor.program.blocks:
        return f"does not exist (rank {rank} has no tb {tb})"
    if executor.call[rank] >= executor.calls:
        return f"has finished all {executor.calls} calls"
    step = executor.blocked_step(block)
    if step is None:
        return f"has finished call {executor.call[rank]} and waits for the other thread blocks of rank {rank}"
    return f"is blocked at op {step.position} ({step.text()})"


def _others(executor: RunState, steps: list[Step], verb: str) -> tuple[str, set[Block]]:
    """Who would do what a stuck step waits for, and what they are doing instead."""
    blocks = sorted({s.block for s in steps})
    states = []
    for block in blocks:
        first = next(s for s in steps if s.block == block)
        states.append(f"{first.where()} would {verb}, but that thread block {_state(executor, block)}")
    return "; ".join(states), set(blocks)


def _why(executor: RunState, index: _Index, step: Step) -> tuple[str, str, set[Block]]:
    """(category, message, the thread blocks it waits for)."""
    program, sync, rank = executor.program, executor.sync, step.rank
    call = executor.call[rank]
    if step.waits:
        for channel in step.waits:
            if sync.signals[(rank, channel)]:
                continue
            kind = program.channels[(rank, channel)]
            end = next((e for e, target in program.paired.items() if target == (rank, channel)), None)
            if end is None:
                message = f"waits on ch{channel}, but rank {kind.get('peer')} declares no {kind['type']} channel"
                return "deadlock", message + " back that pairs with it: no signal can arrive", set()
            sent, taken = index.signals[end], index.waits[(rank, channel)]
            head = f"waits on ch{channel} for a signal of rank {end[0]} (its ch{end[1]}) in call {call}"
            if taken > sent:
                message = f"{head}, but rank {end[0]} signals there {sent} time(s) per call and rank {rank} waits"
                return "deadlock", message + f" {taken} time(s): the extra waits can never pass", set()
            if not index.signallers[end]:
                return "deadlock", f"{head}, but no op of rank {end[0]} signals ch{end[1]}", set()
            text, blocks = _others(executor, index.signallers[end], f"signal ch{end[1]}")
            return "deadlock", f"{head}: {text}", blocks
    if step.acquires:
        for semaphore in step.acquires:
            if sync.semaphores[(rank, semaphore)]:
                continue
            releasers = index.releasers[(rank, semaphore)]
            head = f"acquires sem{semaphore}, which holds no token"
            if not releasers:
                return "deadlock", f"{head}, and no op of rank {rank} releases it", set()
            text, blocks = _others(executor, releasers, f"release sem{semaphore}")
            return "deadlock", f"{head}: {text}", blocks
    if step.barrier is not None:
        barrier_id, listed = step.barrier
        missing = sorted(listed - sync.arrived(step))
        states = "; ".join(f"tb {tb} {_state(executor, (rank, tb))}" for tb in missing)
        message = f"waits at barrier {barrier_id} for tb {', '.join(map(str, missing))}: {states}"
        return "deadlock", message, {(rank, tb) for tb in missing}
    return _why_packets(executor, index, step, call)


def _why_packets(executor: RunState, index: _Index, step: Step, call: int) -> tuple[str, str, set[Block]]:
    memory = executor.memory
    for key in polled_keys(step, memory, call):
        value = memory.values.get(key)
        if value is not None and value.packet and value.call == call:
            continue
        where = memory.describe(key)
        writers = index.packet_writers.get(key[:3], [])
        if value is not None and not value.packet:
            by = f" written by {value.writer.where()} ({value.writer.text()})" if value.writer else " the user wrote"
            message = f"polls {where} for packets of call {call}, but it holds plain data{by}; only packet ops"
            return "packet", message + " write packets a packet op can read", set()
        if not writers:
            return "packet", f"polls {where} for packets of call {call}, but no op writes packets there", set()
        text, blocks = _others(executor, writers, "write packets there")
        return "deadlock", f"polls {where} for packets of call {call}: {text}", blocks
    return "deadlock", "cannot run, and the verifier cannot tell why", set()


def _cycle(start: Block, edges: dict[Block, set[Block]]) -> list[Block]:
    """A shortest cycle through ``start`` in the wait-for graph, as blocks (start first and last)."""
    parents: dict[Block, Block] = {}
    frontier = [start]
    while frontier:
        following = []
        for block in frontier:
            for other in sorted(edges.get(block, ())):
                if other == start:
                    path = [block]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if other not in parents:
                    parents[other] = block
                    following.append(other)
        frontier = following
    return []
