"""What a data op does to the symbolic memory, sub-chunk by sub-chunk.

Every source range is read (a packet source after the executor has seen its packets arrive), a
reduction adds the contents of its sources, anything else moves the contents of its one source,
and every destination range is written, plain or as packets. Packets remember the writer's
vector clock: a reader that polled them has synchronised with the writer.
"""

from __future__ import annotations

from loom.verify.contents import Contents, Value
from loom.verify.memory import Memory
from loom.verify.program import Step
from loom.verify.races import HappensBefore
from loom.verify.report import FindingLog, finding_at


def polled_keys(step: Step, memory: Memory, call: int) -> list[tuple]:
    """The locations a packet op polls before it runs."""
    return [memory.key(ref, offset, call) for ref, packet in step.reads if packet for offset in range(ref.count)]


def packets_ready(keys: list[tuple], memory: Memory, call: int) -> bool:
    for key in keys:
        value = memory.values.get(key)
        if value is None or not value.packet or value.call != call:
            return False
    return True


def run(step: Step, call: int, memory: Memory, clocks: HappensBefore, log: FindingLog) -> None:
    block = step.block
    packet_clock = clocks.snapshot(block) if any(packet for _, packet in step.writes) else None
    count = (step.reads or step.writes)[0][0].count
    for offset in range(count):
        contents: Contents | None = None
        origin = None
        for ref, packet in step.reads:
            key = memory.key(ref, offset, call)
            value = memory.read(block, step, key, call, packet)
            if value is None:
                part, part_origin = Contents.uninitialised(memory.describe(key)), None
            else:
                if value.packet and not packet:
                    _plain_read_of_packets(step, memory, key, value, call, log)
                part, part_origin = value.contents, value.origin
            if contents is None:
                contents, origin = part, part_origin
            else:
                contents = contents + part
        if step.reduces:
            origin = step
        plain = packed = None
        for ref, packet in step.writes:
            if packet:
                packed = packed or Value(contents, True, call, step, origin, packet_clock)
            else:
                plain = plain or Value(contents, False, call, step, origin)
            memory.write(block, step, memory.key(ref, offset, call), call, packed if packet else plain)


def _plain_read_of_packets(step: Step, memory: Memory, key: tuple, value: Value, call: int, log: FindingLog) -> None:
    writer = f" written by {value.writer.where()} ({value.writer.text()})" if value.writer else ""
    message = (
        f"reads {memory.describe(key)} as plain data, but it holds packets{writer}: a plain read does not wait"
        " for the packets and sees their flags; read them with unpack_packet or a *_packet op"
    )
    log.add(finding_at(step, "packet", message, call), kind="plain read of packets")
