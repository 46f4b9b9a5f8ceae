"""The collective's postcondition, derived from the plan alone, and its check at the end of a call.

With ``n`` ranks and ``k`` chunks per slot (docs/plan-format.md, "Buffers, chunks and bytes"),
output chunk ``i`` of rank ``q`` must hold exactly, once each:

- all-reduce: input chunk ``i`` of every rank;
- all-gather: input chunk ``i mod k`` of rank ``i div k`` (``k`` = input chunks);
- reduce-scatter: input chunk ``q·k + i`` of every rank (``k`` = output chunks);
- all-to-all: input chunk ``q·k + (i mod k)`` of rank ``i div k`` (``k`` = input chunks / n);
- broadcast: input chunk ``i`` of the root;
- reduce: at the root, input chunk ``i`` of every rank; the other ranks' outputs must not be written
  at all (NCCL lets a non-root rank pass any buffer as its output, its input included);
- send/recv: input chunk ``i`` of one other rank ``p(q)``, where ``p`` is a permutation: each rank's
  input reaches exactly one rank. As in MSCCL++, the plan picks the pattern (a ring, rank + 4, pairs);
  the check reads ``p(q)`` from what output chunk 0 holds and falls back to ``(q - 1) mod n`` when that
  names no single other rank.

Contributions are of the call just finished; one left over from an earlier call is stale. The
check runs per sub-chunk (sub-chunk ``s`` of an output chunk holds sub-chunk ``s`` of its input
chunks) and reports each wrong output chunk once, naming the op that wrote it last.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from loom.verify.contents import Contents, show_contribution, show_multiset, whole_chunks
from loom.verify.program import Program, Ref
from loom.verify.report import Finding, finding_at
from loom.verify.run_state import RunState

if TYPE_CHECKING:
    from loom.verify.contents import Value


def expected_chunks(program: Program, rank: int, index: int, sender: int | None = None) -> list[tuple[int, int]]:
    """The (rank, input chunk) pairs output chunk ``index`` of ``rank`` must hold, once each (``sender``:
    the rank a send/recv delivers to ``rank``)."""
    n = program.n
    k_in, k_out = program.chunks(rank, "input"), program.chunks(rank, "output")
    collective = program.collective
    if collective == "allreduce":
        return [(r, index) for r in range(n)]
    if collective == "allgather":
        return [divmod(index, k_in)]
    if collective == "reducescatter":
        return [(r, rank * k_out + index) for r in range(n)]
    if collective in ("alltoall", "alltoallv"):
        k = k_in // n
        source, piece = divmod(index, k)
        return [(source, rank * k + piece)]
    if collective == "broadcast":
        return [(program.plan["root"], index)]
    if collective == "reduce":
        return [(r, index) for r in range(n)]
    if collective == "sendrecv":
        return [((rank - 1) % n if sender is None else sender, index)]
    raise ValueError(f"unknown collective {collective!r}")


def check(executor: RunState, rank: int, call: int) -> None:
    """The user reads ``rank``'s output after call ``call``: check every chunk."""
    program, memory = executor.program, executor.memory
    if not program.shape_ok:
        return  # the shape finding says why there is no postcondition to check
    if program.collective == "reduce" and rank != program.plan["root"]:
        _check_untouched(executor, rank, call)
        return
    f = program.factor
    host = (rank, "host")
    sender = _sender(executor, rank, call) if program.collective == "sendrecv" else None
    for index in range(program.chunks(rank, "output")):
        wanted = expected_chunks(program, rank, index, sender)
        values: list[Value | None] = []
        bad = None
        for part in range(f):
            buffer, start = program.alias(rank, "output", index * f + part)
            value = memory.read(host, None, memory.key(Ref(rank, buffer, start, 1), 0, call), call + 1)
            values.append(value)
            expected = tuple(sorted((call, r, i * f + part) for r, i in wanted))
            good = value is not None and not value.packet and not value.contents.unknown
            if bad is None and not (good and value.contents.items == expected):
                bad = part
        if bad is not None:
            executor.log.add(
                _finding(program, rank, index, call, values, bad, wanted), key=("postcondition", rank, index)
            )


def _check_untouched(executor: RunState, rank: int, call: int) -> None:
    """A reduce's non-root rank: nothing may have written its output (it may be any buffer of the caller's)."""
    program, memory = executor.program, executor.memory
    for index in range(program.chunks(rank, "output")):
        for part in range(program.factor):
            buffer, start = program.alias(rank, "output", index * program.factor + part)
            value = memory.read((rank, "host"), None, memory.key(Ref(rank, buffer, start, 1), 0, call), call + 1)
            if value is not None and value.writer is not None:
                message = f"rank {rank} output[{index}] is written, but a reduce writes the root's output only"
                message += f" (root {program.plan['root']}): a non-root rank's output may be any buffer of its caller's"
                executor.log.add(
                    finding_at(value.writer, "postcondition", message, call), key=("postcondition", rank, index)
                )
                break


def _sender(executor: RunState, rank: int, call: int) -> int | None:
    """The rank whose input a send/recv delivered to ``rank`` in ``call``: the one other rank whose input
    output chunk 0 holds (else the ring's ``rank - 1``). Two ranks receiving one rank's input, or a rank
    receiving from another rank than in the call before, is a finding."""
    program, memory = executor.program, executor.memory
    n = program.n
    sender = (rank - 1) % n
    if program.chunks(rank, "output"):
        buffer, start = program.alias(rank, "output", 0)
        value = memory.read((rank, "host"), None, memory.key(Ref(rank, buffer, start, 1), 0, call), call + 1)
        if value is not None and not value.packet:
            ranks = {r for c, r, _ in value.contents.items if c == call}
            if len(ranks) == 1 and rank not in ranks:
                sender = ranks.pop()
    senders = executor.senders
    earlier = senders.get((call - 1, rank))
    other = next((q for (c, q), s in senders.items() if c == call and s == sender and q != rank), None)
    senders[(call, rank)] = sender
    problem = ""
    if other is not None:
        problem = f"rank {rank} and rank {other} both receive rank {sender}'s input"
        problem += ": a send/recv delivers each rank's input to exactly one rank"
    elif earlier is not None and earlier != sender:
        problem = f"rank {rank} receives rank {sender}'s input in call {call}, rank {earlier}'s in call {call - 1}"
    if problem:
        executor.log.add(Finding("postcondition", rank, None, None, problem, call=call), key=("sender", rank))
    return sender


def _finding(
    program: Program, rank: int, index: int, call: int, values: list, bad: int, wanted: list[tuple[int, int]]
) -> Finding:
    f = program.factor
    value = values[bad]
    chunk = f"rank {rank} output[{index}]"
    expected = show_multiset([(show_contribution((call, r, i * f), f, call, True), 1) for r, i in wanted])
    if value is None:
        holds = "nothing: no op wrote it" if all(v is None for v in values) else f"nothing in sub-chunk {bad}/{f}"
        return Finding("postcondition", rank, None, None, f"{chunk} holds {holds}; expected {expected}", call=call)
    if value.packet:
        message = f"{chunk} holds packets, not plain data (never unpacked); expected {expected}"
    elif value.contents.unknown:
        sources = ", ".join(value.contents.unknown[:3])
        message = f"{chunk} holds uninitialised data (read from {sources} before anything was written there)"
        message += f"; expected {expected}"
    else:
        message = _contents_message(program, chunk, values, bad, wanted, call)
    if value.origin is not None and value.origin is not value.writer:
        message += f"; the contents were computed by {value.origin.where()} ({value.origin.text()})"
    if value.writer is None:
        return Finding("postcondition", rank, None, None, message + " (the user's input, never overwritten)", call=call)
    return finding_at(value.writer, "postcondition", message, call)


def _contents_message(
    program: Program, chunk: str, values: list, bad: int, wanted: list[tuple[int, int]], call: int
) -> str:
    f = program.factor
    parts: list[Contents] = [v.contents if v is not None and not v.packet else Contents() for v in values]
    whole = whole_chunks(parts, f)
    if whole is not None:
        got, where = whole, chunk
        want = Counter((call, r, i * f) for r, i in wanted)
    else:
        got, where = Counter(parts[bad].items), f"{chunk} sub-chunk {bad}/{f}"
        want = Counter((call, r, i * f + bad) for r, i in wanted)

    def show(item: tuple) -> str:
        return show_contribution(item, f, call, whole is not None)

    holds = show_multiset([(show(item), times) for item, times in sorted(got.items())])
    expected = show_multiset([(show(item), times) for item, times in sorted(want.items())])
    problems = []
    for item, times in sorted((got - want).items()):
        if item in want:
            problems.append(f"{show(item)} {times + want[item]} times")
        elif item[0] < call:
            problems.append(f"{show(item)} stale (from call {item[0]})")
        elif item[0] > call:
            problems.append(f"{show(item)} from call {item[0]}, written before the user read call {call}'s result")
        else:
            problems.append(f"{show(item)} does not belong here")
    missing = sorted((want - got).elements())
    if missing:
        problems.append(
            "missing " + ", ".join(show(item) for item in missing[:8]) + (" ..." if len(missing) > 8 else "")
        )
    return f"{where} holds {holds}; expected {expected}: " + "; ".join(problems)
