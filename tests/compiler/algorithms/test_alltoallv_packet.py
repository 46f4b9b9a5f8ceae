"""alltoallv_packet, the eager all-to-all-v of small entries (issue 39): what its plan looks like and what it
refuses. Its proof for symbolic counts and the mutants the verifier must catch are in
tests/compiler/verify/test_alltoallv_family.py."""

from __future__ import annotations

import json

import pytest
from loom.algorithms import ALGORITHMS, COUNTED_ALGORITHMS, KiB, MiB
from loom.algorithms._common import peers, slot
from loom.compiler.driver import compile_algorithm
from loom.errors import InvalidArgumentError
from loom.plan.schema import check_schema

NAME = "alltoallv_packet"


def _plan(world_size: int, **options) -> dict:
    return json.loads(compile_algorithm(NAME, world_size, **options))


def test_the_family_is_counted_and_not_in_the_fixed_size_library():
    entry = COUNTED_ALGORITHMS[NAME]
    assert NAME not in ALGORITHMS
    assert (entry.collective, entry.protocol, entry.multi_node) == ("alltoallv", "ll", ())
    assert (entry.min_message_bytes, entry.max_message_bytes) == (0, 64 * KiB)


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
def test_the_plan_sends_every_entry_as_packets_into_the_peers_region(world_size):
    plan = _plan(world_size)
    check_schema(plan)
    header = {key: plan[key] for key in ("collective", "protocol", "inplace", "world_size", "ranks_per_node")}
    assert header == {
        "collective": "alltoallv",
        "protocol": "ll",
        "inplace": False,
        "world_size": world_size,
        "ranks_per_node": world_size,
    }
    assert (plan["min_message_bytes"], plan["max_message_bytes"]) == (0, 65536)
    assert plan["name"] == f"alltoallv_packet_{world_size}r"
    for gpu in plan["gpus"]:
        r = gpu["id"]
        assert (gpu["input_chunks"], gpu["output_chunks"], gpu["scratch_chunks"]) == (
            world_size,
            world_size,
            world_size - 1,
        )
        peer_of = {c["id"]: c["peer"] for c in gpu["channels"]}
        assert {c["type"] for c in gpu["channels"]} == {"memory"}
        assert sorted(peer_of.values()) == [p for p in range(world_size) if p != r]
        tbs = gpu["threadblocks"]
        assert [tb["id"] for tb in tbs] == list(range(world_size))
        for tb, p in zip(tbs, peers(r, world_size), strict=False):
            put, unpack = tb["ops"][:2]
            assert put["op"] == "put_packet" and put["src"] == {"buffer": "input", "index": p}
            (dst,) = put["dsts"]
            assert peer_of[dst["channel"]] == p
            assert (dst["buffer"], dst["index"]) == ("scratch", slot(p, r))
            assert unpack["op"] == "unpack_packet"
            assert (unpack["src"], unpack["dst"]) == (
                {"buffer": "scratch", "index": slot(r, p)},
                {"buffer": "output", "index": p},
            )
        own = tbs[-1]["ops"][-1]
        assert own["op"] == "copy" and (own["src"], own["dst"]) == (
            {"buffer": "input", "index": r},
            {"buffer": "output", "index": r},
        )
        names = {op["op"] for tb in tbs for op in tb["ops"]}
        assert names == {"put_packet", "unpack_packet", "copy"}  # no signal, no wait, no publish


def test_the_capacity_is_the_largest_entry_up_to_one_mib():
    assert _plan(2, max_message_size=MiB)["max_message_bytes"] == MiB
    assert _plan(2, min_message_size=1, max_message_size=4 * KiB)["min_message_bytes"] == 1


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        ((2,), {"inplace": True}, r"alltoallv_packet: runs out of place only"),
        ((2,), {"instances": 2}, r"alltoallv_packet: instances must be 1, got 2; an entry goes whole into one"),
        (
            (4, 2),
            {},
            r"alltoallv_packet: runs on one node only \(ranks_per_node = world_size\), got world_size 4 and"
            r" ranks_per_node 2: its packets go over memory channels; across nodes use alltoallv_fullmesh",
        ),
        ((2, 1), {}, r"runs on one node only .* got world_size 2 and ranks_per_node 1"),
        (
            (2,),
            {"max_message_size": MiB + 1},
            r"alltoallv_packet: max_message_size 1048577 is more than 1048576 bytes; it is the capacity of every"
            r" packet region",
        ),
        ((9,), {}, r"alltoallv_packet does not support world_size 9"),
    ],
)
def test_what_it_refuses_is_named(args, options, message):
    with pytest.raises(InvalidArgumentError, match=message):
        compile_algorithm(NAME, *args, **options)
