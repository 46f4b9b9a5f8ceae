"""The executor: every thread block of every rank runs its steps in order, concurrently, for
several consecutive calls.

A step runs once the steps before it in its thread block are done and what it depends on is
there: the signals of a ``wait``, the tokens of a ``sem_acquire``, the other thread blocks of a
``barrier``, the packets (of this call) a packet op polls. The executor advances every thread
block as far as it can, round after round; the verdicts (races by vector clocks, contents by
symbolic values) do not depend on that order. When no thread block can advance and some have
not finished, the plan deadlocks (``deadlock.explain`` says why).

Calls: a rank's call ends when all its thread blocks have finished; then the user reads its
output (the postcondition is checked) and writes the next call's input, and its thread blocks
start again. Ranks move from call to call independently, as they would on GPUs, so a rank that
races ahead into the next call and overwrites a slower peer's buffers shows up as a race.
"""

from __future__ import annotations

from collections.abc import Callable

from loom.verify.block_threads import BlockThreads, syncs_after, syncs_before
from loom.verify.contents import MAILBOX_ENTRY, Contents, Value
from loom.verify.dataflow import packets_ready, polled_keys
from loom.verify.dataflow import run as run_data_op
from loom.verify.deadlock import explain as explain_deadlock
from loom.verify.memory import Memory
from loom.verify.postcondition import check as check_postcondition
from loom.verify.program import Program, Ref, Step
from loom.verify.races import HappensBefore, merge
from loom.verify.report import FindingLog, finding_at
from loom.verify.sync import Sync
from loom.verify.waiters import check as check_waiters


def _staged_packets(step: Step) -> bool:
    """Packets for a port channel: the block's threads pack them into the channel's staging area as the op runs,
    and the proxy sends the staging area, not this rank's buffers (executor/src/resolve.cc, emitDataPart), then
    the block waits until it no longer reads it. So nothing of the rank is read after the op."""
    return step.name.endswith("_packet")


def proxy_of(block: tuple, channel: int) -> tuple:
    """The block that stands for the proxy carrying ``block``'s port-channel puts on ``channel``."""
    return (block[0], ("proxy", block[1], channel))


class Executor:
    def __init__(self, program: Program, calls: int, log: FindingLog, lockstep: bool = False) -> None:
        """``lockstep``: every rank ends a call before any starts the next (induction.py), and
        ``at_call_start(call)`` runs when all have passed that boundary; True from it ends the run there."""
        self.program = program
        self.calls = calls
        self.log = log
        self.lockstep = lockstep
        self.at_call_start: Callable[[int], bool] | None = None
        self.clocks = HappensBefore()
        self.memory = Memory(program, self.clocks, log)
        self.sync = Sync(program)
        self.tbs: dict[int, list[int]] = {rank: [] for rank in program.gpus}
        for rank, tb in program.blocks:
            self.tbs[rank].append(tb)
        self.call = dict.fromkeys(program.gpus, 0)
        self.senders: dict[tuple[int, int], int] = {}  # send/recv: (call, rank) -> whose input it received
        self.pc = dict.fromkeys(program.blocks, 0)
        self.call_start: dict[tuple, dict] = {}  # a block's clock when its current call began (relaxed signals)
        self.threads = BlockThreads(log)  # the threads of each block (block_threads.py)
        check_waiters(program, log)

    def run(self) -> None:
        for rank in self.call:
            self._boundary(rank, 0)
        blocks = list(self.program.blocks.items())
        while True:
            progress = False
            for block, steps in blocks:
                call = self.call[block[0]]
                if call >= self.calls:
                    continue
                pc = self.pc[block]
                while pc < len(steps) and self._try(steps[pc], call):
                    pc += 1
                    progress = True
                self.pc[block] = pc
            ended = [rank for rank, call in self.call.items() if call < self.calls and self._call_done(rank)]
            if self.lockstep and len(ended) < len(self.call):
                ended = []
            for rank in ended:
                call = self.call[rank] + 1
                self.call[rank] = call
                self._boundary(rank, call)
                for tb in self.tbs[rank]:
                    self.pc[(rank, tb)] = 0
                progress = True
            if self.lockstep and ended and self.at_call_start is not None and self.at_call_start(call):
                self.calls = call
            if all(call >= self.calls for call in self.call.values()):
                for step, what in self.sync.leftovers(self.calls):
                    self.log.add(finding_at(step, "race", what), kind="left over")
                return
            if not progress:
                explain_deadlock(self)
                return

    def _call_done(self, rank: int) -> bool:
        return all(self.pc[(rank, tb)] == len(self.program.blocks[(rank, tb)]) for tb in self.tbs[rank])

    def blocked_step(self, block: tuple[int, int]) -> Step | None:
        """The step ``block`` is stuck at, or None when it has finished its current call."""
        steps = self.program.blocks[block]
        pc = self.pc[block]
        return steps[pc] if pc < len(steps) and self.call[block[0]] < self.calls else None

    def _boundary(self, rank: int, call: int) -> None:
        """Between call ``call - 1`` and call ``call`` of ``rank``: the user reads the result and
        writes the next input. Everything the rank's thread blocks did happens before; everything
        they do next happens after."""
        host = (rank, "host")
        clock = self.clocks.snapshot(host)
        for tb in self.tbs[rank]:
            merge(clock, self.clocks.clock((rank, tb)))
        # The call's end includes its proxies' work (the executor drains what a call posted before it returns).
        for block, proxy_clock in list(self.clocks.clocks.items()):
            if block[0] == rank and isinstance(block[1], tuple) and block[1][0] == "proxy":
                merge(clock, proxy_clock)
        self.clocks.reset(host, clock)
        self.clocks.tick(host)
        if call > 0:
            check_postcondition(self, rank, call - 1)
        if call < self.calls:
            f = self.program.factor
            for position in range(self.program.chunks(rank, "input") * f):
                buffer, start = self.program.alias(rank, "input", position)
                key = self.memory.key(Ref(rank, buffer, start, 1), 0, call)
                value = Value(Contents.input(call, rank, position), False, call, None, None)
                self.memory.write(host, None, key, call, value)
        for tb in self.tbs[rank]:
            self.threads.sync((rank, tb))  # the kernel boundary
            self.clocks.reset((rank, tb), self.clocks.clock(host))
            self.call_start[(rank, tb)] = self.clocks.snapshot(host)

    def _proxy_reads(self, step: Step, clock: dict, call: int) -> None:
        """What a put over a port channel sends is read by the proxy, after the step and until a flush of the
        block on that channel (the executor's port channels: the proxy copies out of the registered buffer when
        it gets to the trigger). So the proxy reads this rank's data the step sends (a put's sources, a
        reduce-and-send's result) once more, as a block of its own: a later write to it that no flush (nor
        anything the proxy's work happens before) orders after is a race."""
        proxy = proxy_of(step.block, step.port_channels[0])
        self._proxy_after(step.block, step.port_channels[0], clock)
        sent = [ref for ref, _ in (step.writes if step.reduces else step.reads) if ref.rank == step.rank]
        for ref in sent:
            for offset in range(ref.count):
                self.memory.read(proxy, step, self.memory.key(ref, offset, call), call)

    def _thread_accesses(self, step: Step, call: int) -> list[tuple[tuple, bool, str]]:
        """What the threads of ``step``'s block touch in it: plain reads (a packet read polls its own), then
        writes."""
        out = []
        for refs, write in ((step.reads, False), (step.writes, True)):
            for ref, packet in refs:
                if packet and not write:
                    continue
                for offset in range(ref.count):
                    key = self.memory.key(ref, offset, call)
                    out.append((key, write, self.memory.describe(key)))
        return out

    def _proxy_after(self, block: tuple, channel: int, clock: dict) -> dict:
        proxy = proxy_of(block, channel)
        self.clocks.learn(proxy, clock)
        return self.clocks.tick(proxy)

    def _read_mailboxes(self, step: Step, call: int) -> None:
        """An alltoallv put into a peer's output first reads where: the entry the peer published into this
        rank's mailbox. It must be the peer's entry for this same call, ordered before the put."""
        for channel in step.mailbox_reads:
            peer = self.program.channels[(step.rank, channel)]["peer"]
            key = (step.rank, "mailbox", channel, 0)
            value = self.memory.read(step.block, step, key, call)
            if value is not None and value.call == call and value.writer is not None:
                continue
            held = "nothing" if value is None else f"its entry of call {value.call}"
            message = (
                f"puts into rank {peer}'s output by the receive entry rank {peer} publishes for call {call}, but"
                f" this rank's mailbox of channel {channel} holds {held} here: rank {peer} publishes no entry"
                " through the channel, or no signal/wait orders its publishing signal before this put"
            )
            self.log.add(finding_at(step, "race", message, call), kind="unpublished entry")

    def _try(self, step: Step, call: int) -> bool:
        """Run ``step`` if it can run now (True), or change nothing (False)."""
        block, sync = step.block, self.sync
        if not step.valid:
            self.clocks.tick(block)
            return True
        if step.waits and not sync.can_wait(step):
            return False
        if step.acquires and not sync.can_acquire(step):
            return False
        if step.barrier is not None and not sync.arrive(step, self.clocks.clock(block)):
            return False
        polled = polled_keys(step, self.memory, call) if step.reads else []
        if polled and not packets_ready(polled, self.memory, call):
            return False
        clock = self.clocks.tick(block)
        if step.waits:
            sync.wait(step, clock)
        if step.acquires:
            sync.acquire(step, clock)
        if step.barrier is not None:
            sync.leave(step, clock)
        for key in polled:
            merge(clock, self.memory.values[key].clock or {})
        if step.mailbox_reads:
            self._read_mailboxes(step, call)
        if syncs_before(step):
            self.threads.sync(block)
        if step.reads or step.writes:
            self.threads.access(step, self._thread_accesses(step, call), call)
            run_data_op(step, call, self.memory, self.clocks, self.log)
        if syncs_after(step):
            self.threads.sync(block)
        if step.port_channels and not _staged_packets(step):
            self._proxy_reads(step, clock, call)
        for channel in step.flushes:
            # The proxy has done everything the block posted on the channel: what it read may be written now.
            merge(clock, self.clocks.clock(proxy_of(block, channel)))
        for peer, channel in step.publishes:
            # This rank's receive entry from `peer`, for this call, into the mailbox of `peer`'s end of the channel.
            entry = Value(Contents(((call, step.rank, MAILBOX_ENTRY),)), False, call, step, None)
            self.memory.write(block, step, (peer, "mailbox", channel, 0), call, entry)
        if step.signals:
            # A port channel's signal goes out through the proxy after the data posted before it: the peer hears
            # of the proxy's copies (and so of the block's steps before them).
            # A relaxed one on a memory channel carries only what the kernel boundary ordered (sync.py).
            call_start = self.call_start[block]
            signalled = {}
            for channel in step.signals:
                if self.program.channels.get((step.rank, channel), {}).get("type") == "port":
                    signalled[channel] = dict(self._proxy_after(block, channel, clock))
                else:
                    signalled[channel] = call_start if sync.relaxed_end(step, channel) else dict(clock)
            sync.signal(step, signalled, call_start)
        if step.releases:
            sync.release(step, clock)
        return True
