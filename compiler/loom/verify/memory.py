"""The symbolic memory of every rank: a value per sub-chunk, and the race check on every access.

A location is ``(rank, buffer, sub-chunk, half)``: the buffer by its in-place name, and ``half``
the half of an ``ll`` plan's scratch a call uses (the executor double-buffers it: call ``c`` uses
half ``c % 2``); simple scratch and the user buffers have one half. Racing accesses become
findings: ``race``, or ``packet`` when packets are involved (scratch reused before its packets
were read).
"""

from __future__ import annotations

from loom.verify.contents import Value
from loom.verify.program import Program, Ref, Step
from loom.verify.races import Access, AccessLog, Block, HappensBefore
from loom.verify.report import FindingLog, finding_at

_UNORDERED = "and no signal/wait, barrier, semaphore or packet orders the two"


class Memory:
    def __init__(self, program: Program, clocks: HappensBefore, log: FindingLog) -> None:
        self.program = program
        self.log = log
        self.values: dict[tuple, Value] = {}
        self.accesses = AccessLog(clocks)

    def key(self, ref: Ref, offset: int, call: int) -> tuple:
        half = call % 2 if ref.buffer == "scratch" and self.program.ll else 0
        return (ref.rank, ref.buffer, ref.start + offset, half)

    def read(self, block: Block, step: Step | None, key: tuple, call: int, packet: bool = False) -> Value | None:
        race = self.accesses.access(block, step, key, False, packet)
        if race is not None:
            self._race(step, race, key, call, write=False, packet=packet)
        return self.values.get(key)

    def write(self, block: Block, step: Step | None, key: tuple, call: int, value: Value) -> None:
        old = self.values.get(key)
        if value.packet and old is not None and old.packet and old.call == call and old.writer not in (None, step):
            if not self.accesses.history[key].reads:
                # Whatever the interleaving, the packets just overwritten can no longer be read:
                # their flag is this call's, so a poller takes the new ones for them.
                message = (
                    f"writes packets at {self.describe(key)} over packets of this call that no op has read yet,"
                    f" written by {old.writer.where()} ({old.writer.text()}): the scratch is reused too early"
                )
                self.log.add(finding_at(step, "packet", message, call), kind="overwrites unread packets")
        race = self.accesses.access(block, step, key, True, value.packet)
        if race is not None:
            self._race(step, race, key, call, write=True, packet=value.packet)
        self.values[key] = value

    def describe(self, key: tuple) -> str:
        """``rank 1 output[3]``, with the in-place alias, sub-chunk and LL half where they apply."""
        rank, buffer, position, half = key
        if buffer == "mailbox":
            return f"rank {rank}'s mailbox of channel {position}"
        f = self.program.factor
        chunk, part = divmod(position, f)
        text = f"rank {rank} {buffer}[{chunk}]"
        other = self._other_name(rank, buffer, chunk)
        if other:
            text += f" (= {other}, in place)"
        if f > 1:
            text += f" sub-chunk {part}/{f}"
        if buffer == "scratch" and self.program.ll:
            text += f" (LL half {half})"
        return text

    def _other_name(self, rank: int, buffer: str, chunk: int) -> str:
        program = self.program
        if not program.inplace or buffer == "scratch":
            return ""
        k_in, k_out = program.chunks(rank, "input"), program.chunks(rank, "output")
        if program.collective == "allgather":
            return f"input[{chunk - rank * k_in}]" if 0 <= chunk - rank * k_in < k_in else ""
        if program.collective == "reducescatter":
            return f"output[{chunk - rank * k_out}]" if 0 <= chunk - rank * k_out < k_out else ""
        return f"output[{chunk}]"

    def _race(self, step: Step | None, earlier: Access, key: tuple, call: int, write: bool, packet: bool) -> None:
        where = self.describe(key)
        category = "packet" if packet or earlier.packet else "race"
        if step is None:  # the user, at a call boundary: the op it raced with is at fault
            rank = key[0]
            verb = "writes" if earlier.write else "reads"
            if write:
                message = f"{verb} {where} unordered with the user's write of rank {rank}'s input for call {call}:"
                message += f" rank {rank} can end call {call - 1} while this op still uses the location"
            else:
                message = f"{verb} {where} unordered with the user's read of the result of call {call - 1}:"
                message += f" rank {rank} can end the call before this write lands ({_UNORDERED})"
            self._add(earlier.step, category, message, call)
            return
        mine = ("writes " if write else "reads ") + ("packets at " if packet else "") + where
        if earlier.step is None:
            theirs = (
                "the user's " + ("write of the input" if earlier.write else "read of the result") + " between calls"
            )
        elif isinstance(earlier.block[1], tuple):  # a port channel's proxy (schedule.proxy_of)
            _, tb, channel = earlier.block[1]
            theirs = (
                f"the proxy's read of it for {earlier.step.where()} ({earlier.step.text()}), which sends it over port"
                f" channel {channel}: the proxy reads a put's source until a flush of tb {tb} on ch{channel}, and no"
                " flush (nor a wait for a signal sent after that data) orders this op after it; flush the channel"
                " first"
            )
            self._add(step, "race", f"{mine} unordered with {theirs}", call)
            return
        else:
            kind = "the write" if earlier.write else "a read"
            theirs = f"{kind} by {earlier.step.where()} ({earlier.step.text()})"
        message = f"{mine} unordered with {theirs}, {_UNORDERED}"
        if write and packet and earlier.packet and not earlier.write:
            message += ": the scratch is reused before its packets were read"
        self._add(step, category, message, call)

    def _add(self, step: Step | None, category: str, message: str, call: int) -> None:
        assert step is not None, "the user's accesses of one rank never race with each other"
        self.log.add(finding_at(step, category, message, call))
