"""Dependency analysis: insert the thread-block syncs a rank's data dependencies need, and no more.

Ops run in DSL order within a thread block; different thread blocks of a rank run concurrently.
For every chunk of the rank's own buffers the pass tracks who wrote it last and who read it since.
When an op touches a chunk in a conflicting way (read after write, write after read or write):

- in the same thread block: a ``nop`` (block-wide sync) before the op, unless a sync op already
  lies between the two;
- in another thread block: a semaphore released right after the earlier op and acquired right
  before the later one, unless the later block is already ordered after the earlier op through
  barriers, semaphores or earlier inserted syncs (tracked with vector clocks).

A read of LL packets that the only write of them so far in the call stored as packets needs
nothing: the reader polls each packet's flag, so it waits for that write itself (MSCCL++ orders
packet hand-overs between thread blocks this way). Writes after such reads are still ordered.

A pipeline counts as one op at the top level; dependencies between ops of one pipeline body get
their ``nop`` inside the body. Two pipelines of different thread blocks that run in lockstep (the
same slicing, the same ranges where they meet, and a semaphore released after the earlier one's
conflicting ops and acquired before the later one's in every iteration, directly or through a
chain of such handshakes across other pipelines) are already ordered slice by slice: they get no
whole-pipeline semaphore, which would undo the pipelining. Chunks reached
through channels are the peers' business: ranks order those accesses with signal and wait.
"""

from __future__ import annotations

import functools
from collections import defaultdict, deque
from collections.abc import Callable

from loom.ir import model as ir
from loom.ir.effects import DATA_OPS, as_packets
from loom.ir.shapes import inplace_alias

_THREAD_SYNC_OPS = {"nop", "barrier", "signal", "wait", "flush", "sem_acquire", "sem_release"}

Chunk = tuple[str, int]


def _same(buffer: str, index: int) -> Chunk:
    return (buffer, index)


def _chunks(refs: list[ir.ChunkRef], name: Callable[[str, int], Chunk]) -> set[Chunk]:
    return {name(ref.buffer, i) for ref in refs for i in range(ref.index, ref.stop)}


def _access(op: ir.Op, name: Callable[[str, int], Chunk] = _same) -> tuple[set[Chunk], set[Chunk]]:
    """(reads, writes) of the rank's own chunks, pipeline bodies included; `name` gives each chunk
    its one name (in-place plans reach the same memory as input and as output)."""
    return _over_body(op, lambda o: (_chunks(o.local_reads(), name), _chunks(o.local_writes(), name)))


def _over_body(op: ir.Op, access: Callable[[ir.Op], tuple[set[Chunk], set[Chunk]]]) -> tuple[set[Chunk], set[Chunk]]:
    """access(op), or for a pipeline the union of access over its body (pipelines do not nest)."""
    if op.op != "pipeline":
        return access(op)
    reads: set[Chunk] = set()
    writes: set[Chunk] = set()
    for inner in op.body:
        r, w = access(inner)
        reads |= r
        writes |= w
    return reads, writes


def _packet_access(op: ir.Op, name: Callable[[str, int], Chunk]) -> tuple[set[Chunk], set[Chunk]]:
    """(reads, writes) of the rank's own chunks that the op reads or writes as LL packets."""

    def packets_of(o: ir.Op) -> tuple[set[Chunk], set[Chunk]]:
        if o.op not in DATA_OPS:
            return set(), set()
        read_fields, write_fields, _ = DATA_OPS[o.op]

        def local(fields: tuple) -> list[ir.ChunkRef]:
            refs = [(getattr(o, f), packet) for f, packet in fields if packet]
            flat = [
                (r, packet) for ref, packet in refs for r in (ref if isinstance(ref, list) else [ref]) if r is not None
            ]
            return [ref for ref, packet in flat if not ref.is_remote and as_packets(packet, ref.buffer)]

        return _chunks(local(read_fields), name), _chunks(local(write_fields), name)

    return _over_body(op, packets_of)


def _touching(body: list[ir.Op], chunks: set[Chunk], name: Callable[[str, int], Chunk]) -> list[int]:
    """Positions of the body's ops that read or write any of ``chunks``."""
    return [i for i, op in enumerate(body) if chunks & set().union(*_access(op, name))]


def _ranges(body: list[ir.Op], chunks: set[Chunk], name: Callable[[str, int], Chunk]) -> set[tuple[Chunk, ...]]:
    """The local chunk ranges of the body that meet ``chunks``, each as its chunks' names in order."""
    out = set()
    for op in body:
        for ref in op.local_reads() + op.local_writes():
            names = tuple(name(ref.buffer, i) for i in range(ref.index, ref.stop))
            if chunks & set(names):
                out.add(names)
    return out


def _sliced_alike(a: ir.Op, b: ir.Op) -> bool:
    """Whether two pipelines cut their ranges alike: same iterations, or same unit and longest range."""
    if a.op != "pipeline" or b.op != "pipeline" or (a.iterations, a.unit_bytes) != (b.iterations, b.unit_bytes):
        return False
    return a.unit_bytes is None or a.longest_range() == b.longest_range()


def _in_lockstep(
    earlier: ir.Op,
    later: ir.Op,
    chunks: set[Chunk],
    semaphore_uses: dict[int, list[ir.Op]],
    name: Callable[[str, int], Chunk],
) -> bool:
    """Whether pipeline ``later`` touches ``chunks`` only after pipeline ``earlier`` did, slice by
    slice: both cut their ranges alike, meet on the same ranges (each chunk in one range, so that
    iteration i of both takes the same slice of it), and in every iteration a chain of per-iteration
    handshakes leads from ``earlier``, after its ops on the chunks, to ``later``, before its own: a
    semaphore ``earlier`` releases and ``later`` acquires, or one acquired by a third pipeline sliced
    alike that then releases the next (MSCCL++'s copy -> reduce -> copy-out stages in three blocks).
    Each semaphore of the chain is released and acquired once per iteration, by those two alone."""
    if not _sliced_alike(earlier, later):
        return False
    ranges = _ranges(earlier.body, chunks, name)
    if ranges != _ranges(later.body, chunks, name) or sum(map(len, ranges)) != len(set().union(*ranges)):
        return False
    first_touch = min(_touching(later.body, chunks, name))
    stage, after = earlier, max(_touching(earlier.body, chunks, name))  # follow the handshakes from here
    seen = {id(earlier)}
    frontier = [(stage, after)]
    while frontier:
        stage, after = frontier.pop()
        released = {
            s
            for op in stage.body[after + 1 :]
            if op.op == "sem_release" and op.data_sync != "none"
            for s in op.semaphores
        }
        for semaphore in released:
            uses = semaphore_uses.get(semaphore, [])
            if len(uses) != 2 or uses.count(stage) != 1:
                continue
            nxt = uses[1] if uses[0] is stage else uses[0]
            if nxt is None or not _sliced_alike(stage, nxt):
                continue
            acquire = next(
                (i for i, op in enumerate(nxt.body) if op.op == "sem_acquire" and semaphore in op.semaphores), None
            )
            if acquire is None:
                continue
            if nxt is later:
                if acquire <= first_touch:
                    return True
            elif id(nxt) not in seen:
                seen.add(id(nxt))
                frontier.append((nxt, acquire))
    return False


def _semaphore_uses(gpu: ir.Gpu) -> dict[int, list[ir.Op]]:
    """semaphore id -> the top-level ops that release or acquire it (a pipeline for its body's),
    once per op that does; semaphores with an initial value count as used by nobody else."""
    uses: dict[int, list[ir.Op]] = defaultdict(list)
    for tb in gpu.threadblocks:
        for op in tb.ops:
            for inner in op.body if op.op == "pipeline" else [op]:
                if inner.op in ("sem_acquire", "sem_release"):
                    for semaphore in inner.semaphores:
                        uses[semaphore].append(op)
    for semaphore in gpu.semaphores:
        if semaphore.initial_value:
            uses[semaphore.id].append(None)  # a count to start with: not a per-iteration handshake
    return uses


def _syncs_threads(op: ir.Op) -> bool:
    return op.op in _THREAD_SYNC_OPS and op.data_sync != "none"


def _merge(into: dict[int, int], other: dict[int, int]) -> None:
    for tb, position in other.items():
        if into.get(tb, -1) < position:
            into[tb] = position


def _sync_body(body: list[ir.Op], name: Callable[[str, int], Chunk]) -> list[ir.Op]:
    """Within one pipeline body (one thread block): a nop wherever an op depends on an earlier one."""
    out: list[ir.Op] = []
    last_write: dict[Chunk, int] = {}
    readers: dict[Chunk, int] = {}
    last_sync = -1
    for position, op in enumerate(body):
        reads, writes = _access(op, name)
        earlier = [last_write[c] for c in reads | writes if c in last_write]
        earlier += [readers[c] for c in writes if c in readers]
        if earlier and max(earlier) > last_sync and not _syncs_threads(op):
            out.append(ir.Op("nop", loc=op.loc, seq=op.seq, auto=True))
            last_sync = position - 0.5
        out.append(op)
        for c in writes:
            last_write[c] = position
            readers.pop(c, None)
        for c in reads:
            readers[c] = position
        if _syncs_threads(op):
            last_sync = position
    return out


def _sync_gpu(gpu: ir.Gpu, name: Callable[[str, int], Chunk]) -> None:
    entries = sorted((op.seq, tb.id, position, op) for tb in gpu.threadblocks for position, op in enumerate(tb.ops))
    clock: dict[int, dict[int, int]] = {tb.id: {} for tb in gpu.threadblocks}
    snapshot: dict[tuple[int, int], dict[int, int]] = {}
    last_write: dict[Chunk, tuple[int, int]] = {}
    readers: dict[Chunk, dict[int, int]] = defaultdict(dict)
    last_sync: dict[int, float] = defaultdict(lambda: -1)
    acquire_before: dict[tuple[int, int], list[int]] = defaultdict(list)
    release_after: dict[tuple[int, int], list[int]] = defaultdict(list)
    nop_before: set[tuple[int, int]] = set()
    released: dict[int, deque] = defaultdict(deque)
    barrier_arrivals: dict[int, list[tuple[int, int]]] = defaultdict(list)
    initial = {s.id: s.initial_value for s in gpu.semaphores}
    next_semaphore = max((s.id for s in gpu.semaphores), default=-1) + 1
    semaphore_uses = _semaphore_uses(gpu)
    op_at = {(tb, position): op for _, tb, position, op in entries}
    writes_so_far: dict[Chunk, int] = defaultdict(int)
    written_as_packets: set[Chunk] = set()  # chunks whose only write so far stored packets

    for _, tb, position, op in entries:
        if op.op == "sem_acquire":
            for semaphore in op.semaphores:
                if initial.get(semaphore, 0) > 0:
                    initial[semaphore] -= 1
                elif released[semaphore]:
                    _merge(clock[tb], released[semaphore].popleft())

        reads, writes = _access(op, name)
        packet_reads, packet_writes = _packet_access(op, name)
        needs: dict[int, int] = {}
        met: dict[tuple[int, int], set[Chunk]] = defaultdict(set)  # earlier op -> the chunks this op meets there
        for c in reads | writes:
            if c in packet_reads and c not in writes and c in written_as_packets:
                continue  # the read polls the packets' flags: it waits for their one write itself
            if c in last_write:
                writer, at = last_write[c]
                needs[writer] = max(needs.get(writer, -1), at)
                met[(writer, at)].add(c)
        for c in writes:
            for reader, at in readers[c].items():
                needs[reader] = max(needs.get(reader, -1), at)
                met[(reader, at)].add(c)

        acquired = False
        in_lockstep: list[tuple[int, int]] = []
        for other, at in sorted(needs.items()):
            if other == tb or clock[tb].get(other, -1) >= at:
                continue
            earlier_ops = [key for key in met if key[0] == other and clock[tb].get(other, -1) < key[1]]
            if earlier_ops == [(other, at)] and _in_lockstep(
                op_at[(other, at)], op, met[(other, at)], semaphore_uses, name
            ):
                in_lockstep.append((other, at))
                continue
            semaphore = next_semaphore
            next_semaphore += 1
            gpu.semaphores.append(ir.Semaphore(semaphore, 0))
            release_after[(other, at)].append(semaphore)
            acquire_before[(tb, position)].append(semaphore)
            _merge(clock[tb], snapshot[(other, at)])
            acquired = True
        if tb in needs and needs[tb] > last_sync[tb] and not acquired and not _syncs_threads(op):
            nop_before.add((tb, position))

        for c in writes:
            last_write[c] = (tb, position)
            readers[c] = {}
            writes_so_far[c] += 1
            if writes_so_far[c] == 1 and c in packet_writes:
                written_as_packets.add(c)
            else:
                written_as_packets.discard(c)
        for c in reads:
            readers[c][tb] = position
        for other, at in in_lockstep:  # ordered slice by slice, not as a whole: later writers still wait for it
            for c in met[(other, at)]:
                readers[c][other] = max(readers[c].get(other, -1), at)
        clock[tb][tb] = position
        if _syncs_threads(op):
            last_sync[tb] = position
        elif acquired or (tb, position) in nop_before:
            last_sync[tb] = position - 0.5  # the sync sits before this op: it does not order what this op writes
        if op.op == "barrier":
            barrier_arrivals[op.barrier_id].append((tb, position))
            if len(barrier_arrivals[op.barrier_id]) == len(op.threadblocks):
                merged: dict[int, int] = {}
                for member, _ in barrier_arrivals[op.barrier_id]:
                    _merge(merged, clock[member])
                for member, at in barrier_arrivals[op.barrier_id]:
                    clock[member] = dict(merged)
                    snapshot[(member, at)] = dict(merged)
        snapshot[(tb, position)] = dict(clock[tb])
        if op.op == "sem_release":
            for semaphore in op.semaphores:
                released[semaphore].append(dict(clock[tb]))

    for block in gpu.threadblocks:
        ops: list[ir.Op] = []
        for position, op in enumerate(block.ops):
            key = (block.id, position)
            if acquire_before.get(key):
                ops.append(
                    ir.Op("sem_acquire", semaphores=sorted(acquire_before[key]), loc=op.loc, seq=op.seq, auto=True)
                )
            if key in nop_before:
                ops.append(ir.Op("nop", loc=op.loc, seq=op.seq, auto=True))
            if op.op == "pipeline":
                op.body = _sync_body(op.body, name)
            ops.append(op)
            if release_after.get(key):
                ops.append(
                    ir.Op("sem_release", semaphores=sorted(release_after[key]), loc=op.loc, seq=op.seq, auto=True)
                )
        block.ops = ops


def run(plan: ir.Plan) -> ir.Plan:
    for gpu in plan.gpus:
        name = _same
        if plan.inplace:
            name = functools.partial(inplace_alias, plan.collective, gpu.id, gpu.input_chunks, gpu.output_chunks)
        _sync_gpu(gpu, name)
    return plan
