"""The plan as the verifier runs it: every thread block's ops, pipelines unrolled, as steps whose
chunk references are resolved to ranges of sub-chunks of one rank's buffer.

Sub-chunks: every chunk is cut into ``factor`` sub-chunks, the least common multiple of the
plan's pipeline iteration counts, so that each iteration of a pipeline works on whole sub-chunks
(iteration ``i`` of ``k`` takes the ``i``-th of ``k`` equal pieces of every range in the body).
A pipeline sized in bytes (``unit_bytes``) iterates as often as the message size makes it; the
verifier runs it with a unit of ``unit_chunks`` chunks (a fraction; ``verify`` tries several), the
sub-chunks cut fine enough that every unit ends on one.
In an in-place plan a reference is resolved to the one name of its chunk (``loom.ir.shapes``), so
``input[i]`` and ``output[i]`` of an all-reduce are one location. A reference through a switch
channel resolves to the same range on every member of the group.

A reference outside what the plan declares (a chunk past the end of the buffer it lands in, an
undeclared channel or semaphore, a barrier over missing thread blocks) is a ``bounds`` finding;
such a step still keeps its thread block's order but moves no data and synchronises nothing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from loom.errors import PlanError
from loom.ir.effects import DATA_OPS, PAIRED_SENDS, REF_FIELDS, as_packets, longest_range, refs_of
from loom.ir.shapes import buffer_slots, inplace_alias
from loom.verify.report import Finding, FindingLog, finding_at, loc_text, op_text

# The packet ops of an ll alltoallv plan (docs/plan-format.md, "Call-sized slots"): a send entry goes whole as
# packets into a region of the receiver's scratch, and the receiver unpacks the region whole into its receive
# entry. Per op: the field that names the entry, the entry's buffer, and the field that names the region.
ENTRY_PACKETS = {"put_packet": ("src", "input", "dsts"), "unpack_packet": ("dst", "output", "src")}
_ENTRY_PACKETS_RULE = (
    "an entry moves as packets only whole, by put_packet into a region of the peer's scratch and unpack_packet"
    " out of this rank's region into its receive entry"
)


@dataclass(frozen=True, slots=True)
class Ref:
    """``count`` sub-chunks from ``start`` of ``rank``'s ``buffer`` (its in-place name)."""

    rank: int
    buffer: str
    start: int
    count: int


@dataclass(eq=False, slots=True)
class Step:
    """One op of a thread block as it runs once: an op outside pipelines, or one iteration of a
    pipeline body op. ``reads`` / ``writes`` are (range, as packets) in operand order."""

    rank: int
    tb: int
    index: int  # position in the thread block's ops
    body: int | None  # position in the pipeline's body
    iteration: int | None
    op: dict
    pipeline: dict | None = None
    reads: list[tuple[Ref, bool]] = field(default_factory=list)
    writes: list[tuple[Ref, bool]] = field(default_factory=list)
    reduces: bool = False
    signals: list[int] = field(default_factory=list)  # channels
    waits: list[int] = field(default_factory=list)
    acquires: list[int] = field(default_factory=list)  # semaphores
    releases: list[int] = field(default_factory=list)
    barrier: tuple[int, frozenset[int]] | None = None
    # alltoallv: a rank keeps a mailbox per channel, where the peer publishes its receive entry from the rank.
    publishes: list[tuple[int, int]] = field(default_factory=list)  # the (peer, its channel) mailboxes written
    mailbox_reads: list[int] = field(default_factory=list)  # this rank's channels whose mailbox a put reads
    # A data op that writes through port channels: the proxy of the first (its thread block's for that
    # channel) moves the data, reading the source until a flush of the block on that channel (schedule.py).
    port_channels: list[int] = field(default_factory=list)
    flushes: list[int] = field(default_factory=list)  # channels a flush (or a fused put ..._and_flush) waits for
    valid: bool = True

    @property
    def name(self) -> str:
        return self.op["op"]

    @property
    def block(self) -> tuple[int, int]:
        return (self.rank, self.tb)

    def text(self) -> str:
        return op_text(self.op)

    def loc(self) -> str | None:
        return loc_text(self.op) or (loc_text(self.pipeline) if self.pipeline else None)

    @property
    def position(self) -> str:
        """``4``, or ``4.2`` for op 2 of the body of pipeline op 4."""
        return f"{self.index}" + (f".{self.body}" if self.body is not None else "")

    def where(self) -> str:
        return f"rank {self.rank} tb {self.tb} op {self.position}"


class Program:
    """Everything the executor needs from the plan, resolved once."""

    def __init__(self, plan: dict, log: FindingLog, unit_chunks: Fraction = Fraction(1)) -> None:
        self.plan = plan
        self.log = log
        self.n: int = plan["world_size"]
        self.collective: str = plan["collective"]
        self.ll = plan["protocol"] == "ll"
        self.inplace = bool(plan["inplace"])
        self.gpus: dict[int, dict] = _gpus(plan)
        self.factor = math.lcm(1, *_iterations(plan), unit_chunks.denominator if has_unit_pipelines(plan) else 1)
        self.unit_width = int(unit_chunks * self.factor)  # sub-chunks per iteration of a unit_bytes pipeline
        self.channels = {(r, c["id"]): c for r, g in self.gpus.items() for c in g["channels"]}
        self.paired = _pair(self.gpus)
        self.semaphores = {
            (r, s["id"]): s.get("initial_value", 0) for r, g in self.gpus.items() for s in g.get("semaphores", [])
        }
        self.shape_ok = self._check_shapes()
        self.blocks: dict[tuple[int, int], list[Step]] = {}
        for rank, gpu in sorted(self.gpus.items()):
            tbs = {tb["id"] for tb in gpu["threadblocks"]}
            for tb in gpu["threadblocks"]:
                self.blocks[(rank, tb["id"])] = self._unroll(rank, tb, tbs)

    def chunks(self, rank: int, buffer: str) -> int:
        return self.gpus[rank].get(f"{buffer}_chunks", 0)

    def alias(self, rank: int, buffer: str, position: int) -> tuple[str, int]:
        """The one name of a sub-chunk of ``rank``'s buffer (input and output alias in place)."""
        if not self.inplace or buffer == "scratch":
            return buffer, position
        f = self.factor
        return inplace_alias(
            self.collective, rank, self.chunks(rank, "input") * f, self.chunks(rank, "output") * f, buffer, position
        )

    # -- set-up --

    def _check_shapes(self) -> bool:
        """The buffer shapes of docs/plan-format.md; the postcondition is defined only for them. A
        test plan (MSCCL++'s TestCollective) has any shape and no postcondition."""
        if self.collective == "test":
            return False
        ok = True
        first = self.gpus[min(self.gpus)]
        for rank, gpu in sorted(self.gpus.items()):
            k_in, k_out = gpu["input_chunks"], gpu["output_chunks"]
            slots_in = buffer_slots(self.collective, "input", self.n)
            slots_out = buffer_slots(self.collective, "output", self.n)
            problem = ""
            if (k_in, k_out) != (first["input_chunks"], first["output_chunks"]):
                problem = f"cuts its buffers into {k_in}/{k_out} input/output chunks, rank {min(self.gpus)} into"
                problem += f" {first['input_chunks']}/{first['output_chunks']}; all ranks must cut them alike"
            elif k_in % slots_in or k_out % slots_out or k_in // slots_in != k_out // slots_out:
                article = "an" if self.collective[0] in "aeiou" else "a"
                problem = (
                    f"{article} {self.collective} plan of {self.n} ranks needs {slots_in} x k input chunks and"
                    f" {slots_out} x k output chunks, got {k_in} and {k_out}"
                )
            if problem:
                ok = False
                self.log.add(_rank_finding(rank, problem))
        return ok

    def _unroll(self, rank: int, tb: dict, tbs: set[int]) -> list[Step]:
        steps = []
        for index, op in enumerate(tb["ops"]):
            if op["op"] != "pipeline":
                for one in _pairs(op):
                    steps.append(self._step(Step(rank, tb["id"], index, None, None, one), tbs, self._part(0, 1)))
                continue
            iterations, part = self._iterations_of(op)
            for i in range(iterations):
                for body, inner in enumerate(op["body"]):
                    for one in _pairs(inner):
                        steps.append(self._step(Step(rank, tb["id"], index, body, i, one, op), tbs, part(i)))
        return steps

    def _part(self, piece: int, pieces: int) -> Callable[[int], tuple[int, int]]:
        """Iteration ``piece`` of ``pieces`` equal slices: [begin, end) sub-chunks of a range of ``count`` chunks."""
        return lambda count: (piece * count * self.factor // pieces, (piece + 1) * count * self.factor // pieces)

    def _iterations_of(self, pipeline: dict) -> tuple[int, Callable[[int], Callable[[int], tuple[int, int]]]]:
        """A pipeline's iteration count and the part of a range each iteration takes."""
        if "unit_bytes" not in pipeline:
            pieces = pipeline["iterations"]
            return pieces, lambda piece: self._part(piece, pieces)
        width, f = self.unit_width, self.factor
        longest = max(longest_range(pipeline["body"]), 1)

        def unit_part(piece: int) -> Callable[[int], tuple[int, int]]:
            return lambda count: (min(piece * width, count * f), min((piece + 1) * width, count * f))

        return -(-longest * f // width), unit_part

    def _step(self, step: Step, tbs: set[int], part: Callable[[int], tuple[int, int]]) -> Step:
        op, name, rank = step.op, step.op["op"], step.rank
        problem = ""
        if name in DATA_OPS:
            reads, writes, step.reduces = DATA_OPS[name]
            counts = {ref.get("count", 1) for f in REF_FIELDS for ref in refs_of(op, f)}
            if name in PAIRED_SENDS and "srcs" in op:  # _pairs left it whole: the counts differ
                problem = f"it has {len(op['srcs'])} sources for {len(op['dsts'])} destinations (srcs pair with dsts)"
            elif len(counts) > 1:
                problem = f"its chunk ranges differ in length ({', '.join(map(str, sorted(counts)))} chunks)"
            for fields, out in ((reads, step.reads), (writes, step.writes)):
                for name_, packet in fields:
                    for data in refs_of(op, name_):
                        resolved = self._resolve(rank, data, part)
                        if isinstance(resolved, str):
                            problem = problem or resolved
                        else:
                            out.extend((ref, as_packets(packet, data.get("buffer", ""))) for ref in resolved)
            if name in ("put_with_signal", "put_with_signal_and_flush"):
                step.signals = sorted({d["channel"] for d in op["dsts"]})
            step.port_channels = sorted(
                {
                    d["channel"]
                    for f in ("dst", "dsts", "packet_dst")
                    for d in refs_of(op, f)
                    if "channel" in d and self.channels.get((rank, d["channel"]), {}).get("type") == "port"
                }
            )
            if name == "put_with_signal_and_flush":
                step.flushes = list(step.port_channels)
            if self.collective == "alltoallv" and not problem:
                problem, step.mailbox_reads = self._counted_refs(rank, op)
        elif name in ("signal", "wait", "flush"):
            missing = [c for c in op["channels"] if (rank, c) not in self.channels]
            if missing:
                problem = f"channel {missing[0]} is not declared on rank {rank}"
            elif name == "signal":
                step.signals = list(op["channels"])
                if op.get("publish"):
                    problem = self._publish_problem(rank, op["channels"])
                    step.publishes = [self.paired[(rank, c)] for c in op["channels"] if (rank, c) in self.paired]
            elif name == "wait":
                step.waits = list(op["channels"])
            else:
                step.flushes = list(op["channels"])
        elif name in ("sem_acquire", "sem_release"):
            missing = [s for s in op["semaphores"] if (rank, s) not in self.semaphores]
            if missing:
                problem = f"semaphore {missing[0]} is not declared on rank {rank}"
            elif name == "sem_acquire":
                step.acquires = list(op["semaphores"])
            else:
                step.releases = list(op["semaphores"])
        elif name == "barrier":
            listed = set(op["threadblocks"])
            if listed - tbs:
                problem = f"barrier {op['barrier_id']} lists tb {min(listed - tbs)}, which rank {rank} does not have"
            elif step.tb not in listed:
                problem = f"barrier {op['barrier_id']} does not list its own thread block (tb {step.tb})"
            else:
                step.barrier = (op["barrier_id"], frozenset(listed))
        elif name != "nop":
            raise PlanError(f"unknown op {name!r}", f"rank {rank} tb {step.tb} op {step.index}")
        if problem:
            step.valid = False
            step.reads, step.writes = [], []
            self.log.add(finding_at(step, "bounds", problem))
        return step

    def _publish_problem(self, rank: int, channels: list[int]) -> str:
        """Why a publishing signal cannot publish, or ""."""
        if self.collective != "alltoallv":
            return f"publish is for alltoallv plans (outputs sized per call), not {self.collective}"
        switch = [c for c in channels if self.channels[(rank, c)]["type"] == "switch"]
        return f"publish through switch channel {switch[0]}: a mailbox belongs to one peer" if switch else ""

    def _counted_refs(self, rank: int, op: dict) -> tuple[str, list[int]]:
        """In an alltoallv plan every byte range comes from the call's table: a rank's own input and
        output entries, and a peer's output entry from this rank, which the peer published into this
        rank's mailbox of the channel; an ``ll`` plan adds its packet regions (``_entry_packets``). What
        the op cannot name that way, or the channels whose mailbox it reads."""
        name = op["op"]
        if self.ll and name in ENTRY_PACKETS:
            return self._entry_packets(rank, op), []
        if self.ll and name.endswith("_packet"):
            return f"{name} is not an op of an alltoallv plan: {_ENTRY_PACKETS_RULE}", []
        channels = []
        for field_ in REF_FIELDS:
            for data in refs_of(op, field_):
                if data["buffer"] == "scratch":
                    if self.ll:
                        return f"an ll alltoallv plan has scratch for packet regions only: {_ENTRY_PACKETS_RULE}", []
                    return "an alltoallv plan has no scratch: its entries are sized per call", []
                if "channel" not in data:
                    continue
                if data["buffer"] != "output" or field_ not in ("dst", "dsts"):
                    return (
                        f"reaches rank {self.channels[(rank, data['channel'])]['peer']}'s {data['buffer']} through"
                        " a channel: in an alltoallv plan only a peer's output entries are known (published), so"
                        " data moves by puts into them",
                        [],
                    )
                channels.append(data["channel"])
        return "", sorted(set(channels))

    def _entry_packets(self, rank: int, op: dict) -> str:
        """What is wrong with a packet op of an ll alltoallv plan, or "". A packet region (one scratch chunk)
        holds one whole entry, led by the count packet the executor writes, so that the run on symbolic
        entries holds for every count. A zero-byte entry still sends its count packet, which the receiver
        polls: both directions of every pair run in every call, which the reuse of the LL halves rests on."""
        from loom.assembly.disasm import format_chunk  # only to word the finding

        name = op["op"]
        entry_field, buffer, region_field = ENTRY_PACKETS[name]
        k = max(1, self.chunks(rank, buffer) // self.n)
        side = "send" if buffer == "input" else "receive"
        for entry in refs_of(op, entry_field):
            whole = entry["index"] % k == 0 and entry.get("count", 1) == k
            if "channel" in entry or entry["buffer"] != buffer or not whole:
                return (
                    f"{name} moves one whole {side} entry as packets (their count packet says how many bytes), so"
                    f" its {entry_field} must be a whole slot of this rank's {buffer} ({k} chunk(s) from a multiple"
                    f" of {k}), not {format_chunk(entry)}"
                )
        remote = name == "put_packet"
        for region in refs_of(op, region_field):
            if region["buffer"] != "scratch" or ("channel" in region) != remote or region.get("count", 1) != 1:
                where = "the receiving peer's scratch, through a channel" if remote else "this rank's own scratch"
                return (
                    f"{name} {'into' if remote else 'out of'} a packet region: its {region_field} must be one chunk"
                    f" of {where}, not {format_chunk(region)}"
                )
            channel = self.channels.get((rank, region["channel"])) if remote else None
            if channel is not None and channel["type"] != "memory":
                # The executor writes the count packet and the entry's packets straight into the peer's
                # scratch: a port channel's proxy would carry them later than the flags say they are there.
                return (
                    f"put_packet into a packet region through {channel['type']} channel {region['channel']}: an ll"
                    " alltoallv plan reaches a peer's region through a memory channel only"
                )
        return ""

    def _resolve(self, rank: int, data: dict, part: Callable[[int], tuple[int, int]]) -> list[Ref] | str:
        """The sub-chunk ranges ``data`` names (one per switch group member), or what is wrong."""
        buffer, index, count = data["buffer"], data["index"], data.get("count", 1)
        owners = [rank]
        if "channel" in data:
            channel = self.channels.get((rank, data["channel"]))
            if channel is None:
                return f"channel {data['channel']} is not declared on rank {rank}"
            if channel["type"] == "switch":
                if channel.get("buffer") != buffer:
                    return f"switch channel {data['channel']} is bound to {channel.get('buffer')}, not {buffer}"
                owners = list(channel["ranks"])
            else:
                owners = [channel["peer"]]
        refs = []
        for owner in owners:
            if owner not in self.gpus:
                return f"channel {data['channel']} leads to rank {owner}, outside the world of {self.n} ranks"
            size = self.chunks(owner, buffer)
            if index < 0 or count < 1 or index + count > size:
                from loom.assembly.disasm import format_chunk  # only to word the finding

                whose = "its own" if owner == rank else f"rank {owner}'s"
                return f"{format_chunk(data)} is outside {whose} {buffer} buffer ({size} chunks)"
            begin, end = part(count)
            if begin == end:
                continue  # past the end of a shorter range in a pipeline sized in bytes: nothing moves
            name, start = self.alias(owner, buffer, index * self.factor + begin)
            refs.append(Ref(owner, name, start, end - begin))
        return refs


def has_unit_pipelines(plan: dict) -> bool:
    """Whether a pipeline of the plan is sized in bytes (``unit_bytes``)."""
    return any("unit_bytes" in op for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"])


def _rank_finding(rank: int, message: str) -> Finding:
    return Finding("bounds", rank, None, None, message)


def _iterations(plan: dict) -> list[int]:
    return [
        op["iterations"]
        for g in plan["gpus"]
        for tb in g["threadblocks"]
        for op in tb["ops"]
        if op["op"] == "pipeline" and "iterations" in op
    ]


def _gpus(plan: dict) -> dict[int, dict]:
    """Rank id -> program; PlanError when the plan does not give every rank exactly one."""
    gpus: dict[int, dict] = {}
    n = plan["world_size"]
    for position, gpu in enumerate(plan["gpus"]):
        rank = gpu["id"]
        if not 0 <= rank < n or rank in gpus:
            raise PlanError(f"rank {rank} is outside the world of {n} or listed twice", f"gpus[{position}].id")
        for kind in ("threadblocks", "channels", "semaphores"):
            ids = [item["id"] for item in gpu.get(kind, [])]
            if len(ids) != len(set(ids)):
                raise PlanError(f"{kind} ids are not unique", f"gpus[{position}].{kind}")
        gpus[rank] = gpu
    if len(gpus) != n:
        raise PlanError(f"no program for rank {min(set(range(n)) - set(gpus))}", "gpus")
    return gpus


def _pair(gpus: dict[int, dict]) -> dict[tuple[int, int], tuple[int, int]]:
    """(rank, channel) -> (peer, channel): the i-th channel of a type from a to b pairs with the
    i-th from b to a. Extra channels on one side stay unpaired (their waits can never pass)."""
    ends: dict[tuple[int, int, str], list[int]] = defaultdict(list)
    for rank, gpu in sorted(gpus.items()):
        for channel in gpu["channels"]:
            if channel["type"] != "switch":
                ends[(rank, channel["peer"], channel["type"])].append(channel["id"])
    paired = {}
    for (rank, peer, kind), ids in ends.items():
        for mine, theirs in zip(ids, ends.get((peer, rank, kind), []), strict=False):
            paired[(rank, mine)] = (peer, theirs)
    return paired


def _pairs(op: dict) -> list[dict]:
    """A send with one source per destination (``srcs`` paired with ``dsts``) as the sends it makes, one
    per pair in order, each shown as that pair; any other op (or a send whose counts differ) as itself."""
    if op["op"] not in PAIRED_SENDS or "srcs" not in op or len(op["srcs"]) != len(op.get("dsts", [])):
        return [op]
    rest = {key: value for key, value in op.items() if key not in ("srcs", "dsts")}
    return [{**rest, "src": src, "dsts": [dst]} for src, dst in zip(op["srcs"], op["dsts"], strict=True)]
