"""The program-level names MSCCL++'s compile path and its programs use: ``reset()`` on channels and
semaphores (nothing to reset: Loom numbers them per program), ``post_process_operations()`` and
``to_json(indent=...)``."""

from __future__ import annotations

import json

from loom.language import (
    AllGather,
    CollectiveProgram,
    MemoryChannel,
    PortChannel,
    Rank,
    Semaphore,
    SwitchChannel,
)


def _allgather(name: str = "ag") -> CollectiveProgram:
    program = CollectiveProgram(name, AllGather(2, 1, True), 2)
    with program:
        for r in range(2):
            peer = 1 - r
            channel = MemoryChannel(peer, r)
            output = Rank(r).get_output_buffer()
            channel.signal(tb=0)
            channel.wait(tb=0)
            channel.put(Rank(peer).get_output_buffer()[r : r + 1], output[r : r + 1], tb=0)
            channel.signal(tb=0)
            channel.wait(tb=0)
    return program


def test_reset_is_there_and_numbering_starts_again_with_every_program():
    for kind in (MemoryChannel, PortChannel, SwitchChannel, Semaphore):
        kind.reset()  # what MSCCL++'s CollectiveProgram.__exit__ and its tools call
    first, second = json.loads(_allgather("a").to_json()), json.loads(_allgather("b").to_json())
    assert first["gpus"][0]["channels"] == second["gpus"][0]["channels"]
    assert first["gpus"][0]["channels"][0]["id"] == 0


def test_post_process_operations_then_to_json_with_an_indent():
    program = _allgather()
    program.post_process_operations()
    canonical = program.to_json()
    indented = program.to_json(indent=4)
    assert json.loads(indented) == json.loads(canonical)
    assert indented != canonical and '\n    "' in indented
    assert program.to_json(indent=2, sort_keys=True) == json.dumps(json.loads(canonical), indent=2, sort_keys=True)


def test_a_port_channel_forwards_packets_already_packed_in_scratch():
    """MSCCL++'s multi-node all-reduce packs locally (copy_packets), then sends the packed scratch with
    PortChannel.put_packets: the packets are forwarded as they are (read_put_packet), and the plan
    verifies."""
    from loom.language import Buffer
    from loom.verify import verify

    program = CollectiveProgram("ag_port_packets", AllGather(2, 1, False), 2, protocol="LL")
    with program:
        scratch = [Buffer(r, 2) for r in range(2)]
        for r in range(2):
            peer, rank = 1 - r, Rank(r)
            channel = PortChannel(peer, r)
            rank.copy_packets(scratch[r][0:1], rank.get_input_buffer()[0:1], tb=0)
            channel.put_packets(scratch[peer][1:2], scratch[r][0:1], tb=0)
            rank.copy(rank.get_output_buffer()[r : r + 1], rank.get_input_buffer()[0:1], tb=0)
            rank.unpack_packets(rank.get_output_buffer()[peer : peer + 1], scratch[r][1:2], tb=0)
    plan = json.loads(program.to_json())
    names = [op["op"] for op in plan["gpus"][0]["threadblocks"][0]["ops"]]
    assert "read_put_packet" in names and "put_packet" not in names, names
    assert verify(plan) == []
