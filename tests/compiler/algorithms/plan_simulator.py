"""A light symbolic simulator for compiled plans (pure Python over the plan dict), for the tests.

It runs a plan on symbolic data for several consecutive calls and checks, for every rank at the end
of every call, the collective's postcondition: each output chunk holds exactly the contributions
(rank, input chunk) the collective promises, from this call. On the way it reports

- races: two accesses to one location (at least one a write) from different thread blocks, or
  ranks, that no chain of signal/wait, semaphore, barrier, packet poll or kernel boundary orders
  (tracked with vector clocks, so the verdict does not depend on the interleaving simulated);
- deadlocks: thread blocks that can never continue (a wait no signal satisfies, packets never sent);
- a contribution reduced twice, uninitialised or stale data (from an earlier call) reaching an
  output, plain reads of packet data.

Model. Chunks are cut into sub-chunks so that pipeline slices are whole sub-chunks; every op works
element-wise on sub-chunks. Ops of one thread block run in order. Puts are synchronous (a port
channel's proxy is treated as part of the issuing thread block). ``signal`` hands the issuing block's
vector clock to the peer's matching ``wait`` (relaxed or not); a packet read polls until the packet of
the current call is there and takes the writer's clock. Calls are separated per rank by a kernel
boundary, where the user reads every output and writes fresh inputs. LL scratch alternates between
two buffers from call to call (the executor double-buffers it); simple scratch is one buffer.
In-place plans alias input and output (all-gather: input = output slot ``rank``; reduce-scatter:
output = input slot ``rank``, the MSCCL++ convention).

Not modelled: ``data_sync`` (thread-level sync inside a block), the asynchrony of port-channel
puts (a source overwritten before ``flush`` is not reported), and switch-channel (multicast) ops,
which raise :class:`Unsupported`.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field


class SimulationError(AssertionError):
    """The plan does not compute its collective, races, or deadlocks; the message says where."""


class Unsupported(SimulationError):
    """The plan uses an op the simulator does not model."""


Clock = dict  # (rank, tb) -> count of ops that block has done


@dataclass
class Ref:
    rank: int  # the rank that owns the buffer
    buffer: str
    start: int  # in sub-chunks
    count: int


@dataclass
class Step:
    """One op of a thread block, pipeline iterations unrolled, refs resolved to sub-chunks."""

    op: dict
    where: str
    src: Ref | None = None
    srcs: list[Ref] = field(default_factory=list)
    dst: Ref | None = None
    packet_dst: Ref | None = None
    dsts: list[Ref] = field(default_factory=list)
    channels: list[int] = field(default_factory=list)  # for signal / wait / flush / put_with_signal


@dataclass
class Value:
    packet: bool
    call: int  # the call that wrote it (a packet's flag)
    data: frozenset  # contributions (call, rank, input sub-chunk)
    writer: dict | None = None  # vector clock of the writer (packets: what a poller learns)


@dataclass
class Access:
    write: tuple | None = None  # (block, count)
    reads: dict = field(default_factory=dict)  # block -> count


def expected_contributions(plan: dict, rank: int, index: int) -> set[tuple[int, int]]:
    """The postcondition of output chunk ``index`` of ``rank``, from the plan alone."""
    n = plan["world_size"]
    gpu = next(g for g in plan["gpus"] if g["id"] == rank)
    collective = plan["collective"]
    if collective == "allreduce":
        return {(r, index) for r in range(n)}
    if collective == "allgather":
        return {divmod(index, gpu["input_chunks"])}
    if collective == "reducescatter":
        k = gpu["output_chunks"]
        return {(r, rank * k + index) for r in range(n)}
    if collective == "alltoall":
        k = gpu["input_chunks"] // n
        source, piece = divmod(index, k)
        return {(source, rank * k + piece)}
    if collective == "broadcast":
        return {(plan["root"], index)}
    if collective == "sendrecv":
        return {((rank - 1) % n, index)}
    raise Unsupported(f"collective {collective!r}")


class PlanSimulator:
    def __init__(self, plan: dict) -> None:
        self.plan = plan
        self.n = plan["world_size"]
        self.ll = plan["protocol"] == "ll"
        self.gpus = {g["id"]: g for g in plan["gpus"]}
        self.factor = math.lcm(1, *self._iterations())
        self.channels: dict[tuple[int, int], dict] = {}
        self.paired: dict[tuple[int, int], tuple[int, int]] = {}
        self._pair_channels()
        self.programs: dict[tuple[int, int], list[Step]] = {}
        for gpu in plan["gpus"]:
            for tb in gpu["threadblocks"]:
                self.programs[(gpu["id"], tb["id"])] = self._unroll(gpu["id"], tb)

    # -- set-up --

    def _iterations(self) -> list[int]:
        return [
            op["iterations"]
            for g in self.plan["gpus"]
            for tb in g["threadblocks"]
            for op in tb["ops"]
            if op["op"] == "pipeline"
        ]

    def _pair_channels(self) -> None:
        ends: dict[tuple[int, int, str], list[int]] = defaultdict(list)
        for gpu in self.plan["gpus"]:
            for channel in gpu["channels"]:
                self.channels[(gpu["id"], channel["id"])] = channel
                if channel["type"] != "switch":
                    ends[(gpu["id"], channel["peer"], channel["type"])].append(channel["id"])
        for (rank, peer, kind), ids in ends.items():
            back = ends.get((peer, rank, kind), [])
            if len(back) != len(ids):
                raise SimulationError(f"rank {rank} has {len(ids)} {kind} channels to {peer}, {len(back)} come back")
            for mine, theirs in zip(ids, back, strict=True):
                self.paired[(rank, mine)] = (peer, theirs)

    def _ref(self, rank: int, data: dict, piece: int = 0, pieces: int = 1) -> Ref:
        """Piece ``piece`` of ``pieces`` equal pieces of a reference's range, in sub-chunks."""
        owner = rank
        if "channel" in data:
            channel = self.channels[(rank, data["channel"])]
            if channel["type"] == "switch":
                raise Unsupported("switch channels")
            owner = channel["peer"]
        count = data.get("count", 1) * self.factor
        return Ref(owner, data["buffer"], data["index"] * self.factor + piece * count // pieces, count // pieces)

    def _step(self, rank: int, op: dict, where: str, piece: int = 0, pieces: int = 1) -> Step:
        def ref(data: dict) -> Ref:
            return self._ref(rank, data, piece, pieces)

        step = Step(op, where)
        if "src" in op:
            step.src = ref(op["src"])
        step.srcs = [ref(s) for s in op.get("srcs", [])]
        if "dst" in op:
            step.dst = ref(op["dst"])
        if "packet_dst" in op:
            step.packet_dst = ref(op["packet_dst"])
        step.dsts = [ref(d) for d in op.get("dsts", [])]
        if op["op"] in ("put_with_signal", "put_with_signal_and_flush"):
            step.channels = sorted({d["channel"] for d in op["dsts"]})
        else:
            step.channels = list(op.get("channels", []))
        return step

    def _unroll(self, rank: int, tb: dict) -> list[Step]:
        steps = []
        for position, op in enumerate(tb["ops"]):
            where = f"rank {rank} tb {tb['id']} op {position} ({op['op']}"
            loc = op.get("loc")
            where += f" at {loc['file']}:{loc['line']})" if loc else ")"
            if op["op"] == "pipeline":
                for i in range(op["iterations"]):
                    for inner_position, inner in enumerate(op["body"]):
                        inner_where = f"{where[:-1]}, iteration {i}, body op {inner_position} {inner['op']})"
                        steps.append(self._step(rank, inner, inner_where, i, op["iterations"]))
            else:
                steps.append(self._step(rank, op, where))
        return steps

    # -- memory --

    def _key(self, ref: Ref, offset: int, call: int) -> tuple:
        rank, buffer, position = ref.rank, ref.buffer, ref.start + offset
        gpu = self.gpus[rank]
        if buffer == "scratch":
            return (rank, "scratch", call % 2 if self.ll else 0, position)
        if self.plan["inplace"]:
            collective = self.plan["collective"]
            if collective == "allgather" and buffer == "input":
                return (rank, "output", rank * gpu["input_chunks"] * self.factor + position)
            if collective == "reducescatter" and buffer == "output":
                return (rank, "input", rank * gpu["output_chunks"] * self.factor + position)
            if collective not in ("allgather", "reducescatter"):
                return (rank, "output", position)
        return (rank, buffer, position)

    # -- running --

    def run(self, calls: int = 3) -> None:
        """Simulate ``calls`` consecutive calls; SimulationError on the first problem."""
        self.memory: dict[tuple, Value] = {}
        self.access: dict[tuple, Access] = defaultdict(Access)
        self.queues: dict[tuple[int, int], deque] = defaultdict(deque)  # (rank, channel) -> signals to wait for
        self.semaphores: dict[tuple[int, int], deque] = defaultdict(deque)
        self.initial = {
            (g["id"], s["id"]): s.get("initial_value", 0) for g in self.plan["gpus"] for s in g.get("semaphores", [])
        }
        self.barriers: dict[tuple, dict] = {}
        self.clock: dict[tuple, Clock] = {}
        blocks = defaultdict(list)
        for rank, tb in self.programs:
            blocks[rank].append(tb)
        for rank in range(self.n):
            self._boundary(rank, blocks[rank], 0, calls)
        call = {rank: 0 for rank in range(self.n)}
        pc = {key: 0 for key in self.programs}
        while True:
            progress = False
            for key, steps in self.programs.items():
                rank = key[0]
                if call[rank] >= calls:
                    continue
                while pc[key] < len(steps) and self._try(key, steps[pc[key]], call[rank]):
                    pc[key] += 1
                    progress = True
            for rank in range(self.n):
                if call[rank] < calls and all(pc[(rank, tb)] == len(self.programs[(rank, tb)]) for tb in blocks[rank]):
                    call[rank] += 1
                    self._boundary(rank, blocks[rank], call[rank], calls)
                    for tb in blocks[rank]:
                        pc[(rank, tb)] = 0
                    progress = True
            if all(c >= calls for c in call.values()):
                left = {key: len(queue) for key, queue in self.queues.items() if queue}
                if left:
                    raise SimulationError(f"signals nobody waits for, (rank, channel): count = {left}")
                return
            if not progress:
                stuck = []
                for key, steps in self.programs.items():
                    if call[key[0]] < calls and pc[key] < len(steps):
                        step = steps[pc[key]]
                        stuck.append(f"{step.where} in call {call[key[0]]}: {self._blocked_reason(key, step)}")
                raise SimulationError("deadlock; blocked:\n  " + "\n  ".join(stuck[:12]))

    def _boundary(self, rank: int, tbs: list[int], call: int, calls: int) -> None:
        """Kernel boundary before call ``call`` (and after call - 1): check outputs, write fresh inputs."""
        host = (rank, "host")
        merged: Clock = dict(self.clock.get(host, {}))
        for tb in tbs:
            _merge(merged, self.clock.get((rank, tb), {}))
        merged[host] = merged.get(host, 0) + 1
        self.clock[host] = merged
        gpu = self.gpus[rank]
        f = self.factor
        if call > 0:
            for index in range(gpu["output_chunks"]):
                expected = expected_contributions(self.plan, rank, index)
                for sub in range(f):
                    key = self._key(Ref(rank, "output", index * f, f), sub, call - 1)
                    self._check_access(host, key, write=False, where=f"the user's read of rank {rank}'s output")
                    value = self.memory.get(key)
                    want = {(call - 1, r, i * f + sub) for r, i in expected}
                    got = None if value is None else set(value.data)
                    if value is None or value.packet or got != want:
                        shown = "nothing" if value is None else ("packets of " if value.packet else "") + _show(got, f)
                        raise SimulationError(
                            f"call {call - 1}: rank {rank} output chunk {index} (sub-chunk {sub} of {f}) holds {shown};"
                            f" expected {_show(want, f)}"
                        )
        if call < calls:
            for index in range(gpu["input_chunks"]):
                for sub in range(f):
                    position = index * f + sub
                    key = self._key(Ref(rank, "input", position, 1), 0, call)
                    self._check_access(host, key, write=True, where=f"the user's write of rank {rank}'s input")
                    self.memory[key] = Value(False, call, frozenset({(call, rank, position)}))
        for tb in tbs:
            self.clock[(rank, tb)] = dict(merged)

    def _tick(self, block: tuple) -> Clock:
        clock = self.clock.setdefault(block, {})
        clock[block] = clock.get(block, 0) + 1
        return clock

    def _check_access(self, block: tuple, key: tuple, write: bool, where: str) -> None:
        clock = self.clock[block]
        entry = self.access[key]
        mine = clock.get(block, 0)

        def ordered(other: tuple) -> bool:
            who, count = other
            return who == block or clock.get(who, 0) >= count

        if entry.write is not None and not ordered(entry.write):
            verb = "writes" if write else "reads"
            raise SimulationError(
                f"race at {_where(key)}: {where} {verb} it unordered with the write by {_who(entry.write[0])}"
            )
        if write:
            for reader, count in entry.reads.items():
                if not ordered((reader, count)):
                    raise SimulationError(
                        f"race at {_where(key)}: {where} writes it unordered with the read by {_who(reader)}"
                    )
            entry.write = (block, mine)
            entry.reads = {}
        else:
            entry.reads[block] = mine

    # -- one op --

    def _blocked_reason(self, block, step: Step) -> str:
        name = step.op["op"]
        if name == "wait":
            missing = [str(c) for c in step.channels if not self.queues[(block[0], c)]]
            return "no signal for channel(s) " + ", ".join(missing)
        if name == "sem_acquire":
            return "semaphore(s) never released"
        if name == "barrier":
            return "the barrier's other thread blocks never arrive"
        return "packets of this call never arrive (or the chunk holds plain data)"

    def _polled(self, ref: Ref, call: int) -> list[tuple]:
        return [self._key(ref, i, call) for i in range(ref.count)]

    def _packets_ready(self, refs: list[Ref], call: int) -> bool:
        for ref in refs:
            for key in self._polled(ref, call):
                value = self.memory.get(key)
                if value is None or not value.packet or value.call != call:
                    return False
        return True

    def _try(self, block: tuple, step: Step, call: int) -> bool:
        """Run ``step`` if it can run now (True), or leave everything as it was (False)."""
        rank = block[0]
        name = step.op["op"]
        if name == "wait":
            queues = [self.queues[(rank, c)] for c in step.channels]
            if not all(queues):
                return False
            clock = self._tick(block)
            for queue in queues:
                _merge(clock, queue.popleft())
            return True
        if name == "sem_acquire":
            for sid in step.op["semaphores"]:
                if self.initial.get((rank, sid), 0) <= 0 and not self.semaphores[(rank, sid)]:
                    return False
            clock = self._tick(block)
            for sid in step.op["semaphores"]:
                if self.initial.get((rank, sid), 0) > 0:
                    self.initial[(rank, sid)] -= 1
                else:
                    _merge(clock, self.semaphores[(rank, sid)].popleft())
            return True
        if name == "barrier":
            key = (rank, step.op["barrier_id"], call)
            state = self.barriers.setdefault(key, {"arrived": {}, "released": None})
            if block[1] not in state["arrived"]:
                state["arrived"][block[1]] = dict(self._tick(block))
            if set(state["arrived"]) != set(step.op["threadblocks"]):
                return False
            if state["released"] is None:
                merged: Clock = {}
                for clock in state["arrived"].values():
                    _merge(merged, clock)
                state["released"] = merged
            _merge(self.clock[block], state["released"])
            return True
        polled = self._packet_reads(step)
        if polled and not self._packets_ready(polled, call):
            return False
        clock = self._tick(block)
        for ref in polled:
            for key in self._polled(ref, call):
                _merge(clock, self.memory[key].writer or {})
        if name in ("signal", "put_with_signal", "put_with_signal_and_flush"):
            if name != "signal":
                self._data(block, step, call)
            for channel in step.channels:
                self.queues[self.paired[(rank, channel)]].append(dict(self.clock[block]))
            return True
        if name in ("flush", "nop", "sem_release"):
            if name == "sem_release":
                for sid in step.op["semaphores"]:
                    self.semaphores[(rank, sid)].append(dict(clock))
            return True
        self._data(block, step, call)
        return True

    @staticmethod
    def _packet_reads(step: Step) -> list[Ref]:
        name = step.op["op"]
        if name in ("unpack_packet", "read_put_packet"):
            return [step.src]
        if name in ("reduce_packet", "reduce_send_packet", "reduce_copy_packet", "reduce_copy_send_packet"):
            return list(step.srcs)
        return []

    def _read(self, block, ref: Ref, offset: int, call: int, packet: bool, where: str) -> Value:
        key = self._key(ref, offset, call)
        self._check_access(block, key, write=False, where=where)
        value = self.memory.get(key)
        if value is None:
            raise SimulationError(f"{where} reads {_where(key)}, which nothing wrote")
        if value.packet != packet:
            raise SimulationError(
                f"{where} reads {_where(key)} as {'packets' if packet else 'plain data'}, but it holds"
                f" {'packets' if value.packet else 'plain data'}"
            )
        return value

    def _write(self, block, ref: Ref, offset: int, call: int, value: Value, where: str) -> None:
        key = self._key(ref, offset, call)
        self._check_access(block, key, write=True, where=where)
        self.memory[key] = value

    def _data(self, block: tuple, step: Step, call: int) -> None:
        name, where = step.op["op"], step.where
        if name.startswith("multimem"):
            raise Unsupported(f"{where}: switch-channel ops are not simulated")
        packet_srcs = set(map(id, self._packet_reads(step)))
        sources = ([step.src] if step.src else []) + list(step.srcs)
        count = (step.src or (step.srcs[0] if step.srcs else step.dst)).count
        packet_out = name in ("put_packet", "read_put_packet", "copy_packet")
        reduces = "reduce" in name
        snapshot = dict(self.clock[block])
        for offset in range(count):
            values = [self._read(block, ref, offset, call, id(ref) in packet_srcs, where) for ref in sources]
            if reduces:
                data: frozenset = frozenset()
                for value in values:
                    overlap = data & value.data
                    if overlap:
                        raise SimulationError(f"{where}: contribution(s) {_show(overlap, self.factor)} reduced twice")
                    data |= value.data
            else:
                data = values[0].data
            plain = Value(False, call, data)
            packed = Value(True, call, data, snapshot)
            if step.dst is not None:
                self._write(block, step.dst, offset, call, packed if name == "copy_packet" else plain, where)
            if step.packet_dst is not None:
                self._write(block, step.packet_dst, offset, call, packed, where)
            for ref in step.dsts:
                is_packet = packet_out or name in ("reduce_send_packet", "reduce_copy_send_packet")
                self._write(block, ref, offset, call, packed if is_packet else plain, where)


def _merge(into: Clock, other: Clock) -> None:
    for who, count in other.items():
        if into.get(who, 0) < count:
            into[who] = count


def _who(block: tuple) -> str:
    rank, tb = block
    return f"rank {rank} {'(the user, between calls)' if tb == 'host' else f'tb {tb}'}"


def _where(key: tuple) -> str:
    if key[1] == "scratch":
        return f"rank {key[0]} scratch{'[half ' + str(key[2]) + ']'} sub-chunk {key[3]}"
    return f"rank {key[0]} {key[1]} sub-chunk {key[2]}"


def _show(data, factor: int) -> str:
    if not data:
        return "{}"
    items = sorted(data)
    text = ", ".join(f"c{call}:r{rank}[{sub // factor}.{sub % factor}]" for call, rank, sub in items[:8])
    return "{" + text + (", ..." if len(items) > 8 else "") + "}"


def simulate(plan: dict, calls: int = 3) -> None:
    """Run ``plan`` for ``calls`` consecutive calls; SimulationError when it is wrong."""
    PlanSimulator(plan).run(calls)
