"""The registry, build() signatures and docstrings, and the errors for bad names, shapes and options."""

from __future__ import annotations

import inspect
import json

import pytest
from library_cases import walk_ops
from loom.algorithms import ALGORITHMS, MULTI_NODE_SHAPES, Algorithm, get, names
from loom.compiler.driver import build_algorithm, compile_algorithm, list_algorithms
from loom.errors import InvalidArgumentError
from loom.language import CollectiveProgram

EXPECTED = {
    "allreduce_allpairs_packet",
    "allreduce_twoshot_packet",
    "allreduce_rs_ag",
    "allreduce_rs_ag_pipelined",
    "allreduce_hierarchical",
    "allreduce_hierarchical_packet",
    "allreduce_hierarchical_rs_ag",
    "allreduce_zero_copy",
    "allreduce_read",
    "allreduce_ring",
    "allgather_fullmesh_packet",
    "allgather_fullmesh",
    "allgather_ring",
    "allgather_ring_port",
    "allgather_read",
    "allgather_fanout",
    "reducescatter_fullmesh",
    "reducescatter_fullmesh_packet",
    "reducescatter_read",
    "alltoall_fullmesh",
    "alltoall_read",
    "alltoall_port",
    "broadcast",
    "reduce_read",
    "reduce_packet",
    "sendrecv",
}
MULTI_NODE_REQUIRED = {
    "allreduce_hierarchical",
    "allgather_fullmesh",
    "reducescatter_fullmesh",
    "alltoall_fullmesh",
    "sendrecv",
}


def test_the_library_has_every_algorithm():
    assert set(names()) == EXPECTED
    assert names() == sorted(ALGORITHMS)
    assert all(isinstance(entry, Algorithm) and entry.name == name for name, entry in ALGORITHMS.items())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_entry_module_signature_and_docstring(name):
    entry = get(name)
    module = entry.load()
    assert module.__doc__ and len(module.__doc__.split()) > 40, "the docstring says what, for which sizes, parameters"
    doc = module.__doc__.lower()
    assert "parameters" in doc and "world_size" in doc and "message" in doc
    parameters = inspect.signature(module.build).parameters
    assert list(parameters)[:2] == ["world_size", "ranks_per_node"]
    assert parameters["ranks_per_node"].default is None
    for keyword, default in (("instances", 1), ("inplace", False), ("name", None)):
        assert parameters[keyword].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[keyword].default == default
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    assert entry.protocol in ("simple", "ll")
    assert name.endswith("_packet") == (entry.protocol == "ll")
    assert 0 <= entry.min_message_bytes <= entry.max_message_bytes
    if entry.protocol == "ll":
        assert entry.max_message_bytes <= 1 << 20
    assert entry.world_sizes in ((), tuple(range(2, 9)))
    assert all(nodes >= 2 and 1 <= per_node <= 8 and nodes * per_node <= 32 for nodes, per_node in entry.multi_node)
    if name in MULTI_NODE_REQUIRED:
        assert set(entry.multi_node) >= {(2, g) for g in range(2, 9)}
    # Every collective but sendrecv has an algorithm for every multi-node shape (what the JIT compiles).
    for collective in ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast"):
        shapes = set().union(*(set(e.multi_node) for e in ALGORITHMS.values() if e.collective == collective))
        assert shapes == set(MULTI_NODE_SHAPES), collective


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_build_returns_the_program(name):
    entry = get(name)
    world_size, per_node = (4, 2) if not entry.world_sizes else (2, None)
    program = entry.build(world_size, per_node)
    assert isinstance(program, CollectiveProgram)
    assert program.name == (f"{name}_2x2" if per_node else f"{name}_2r")
    assert isinstance(build_algorithm(name, world_size, per_node, instances=2), CollectiveProgram)


def test_list_algorithms_is_plain_data():
    listed = list_algorithms()
    assert [entry["name"] for entry in listed] == names()
    assert json.loads(json.dumps(listed)) == listed
    pipelined = next(entry for entry in listed if entry["name"] == "allreduce_rs_ag_pipelined")
    assert pipelined["options"] == {"iterations": 4}
    hierarchical = next(entry for entry in listed if entry["name"] == "allreduce_hierarchical")
    assert hierarchical["world_sizes"] == [] and [2, 8] in hierarchical["multi_node"]


def test_unknown_algorithm_lists_the_known_ones():
    with pytest.raises(InvalidArgumentError) as caught:
        compile_algorithm("allreduce_magic", 8)
    message = str(caught.value)
    assert "allreduce_magic" in message
    assert all(name in message for name in EXPECTED)


@pytest.mark.parametrize(
    ("name", "world_size", "per_node", "fragment"),
    [
        ("allreduce_rs_ag", 16, None, "world sizes 2 to 8 on one node"),
        ("allreduce_rs_ag", 1, None, "does not support world_size 1"),
        ("allreduce_rs_ag", 8, 4, "no multi-node shapes"),
        ("allreduce_hierarchical", 8, None, "2 nodes x 2 to 8 ranks"),
        ("allreduce_hierarchical", 12, 4, "does not support 3 nodes x 4 ranks"),
        ("allgather_fullmesh", 8, 3, "ranks_per_node must be a positive integer that divides world_size 8"),
        ("allgather_fullmesh", 0, None, "world_size must be a positive integer"),
        ("allgather_fullmesh", "8", None, "world_size must be a positive integer"),
        ("allgather_fullmesh", 32, 16, "2 or more nodes x 1 to 8 ranks, 32 ranks at most"),
        ("allreduce_hierarchical_rs_ag", 40, 8, "does not support 5 nodes x 8 ranks"),
        ("allreduce_hierarchical_rs_ag", 4, None, "it supports no single-node shapes"),
        ("reduce_read", 9, None, "world sizes 2 to 8 on one node"),
        ("reduce_read", 8, 4, "no multi-node shapes"),
        ("reduce_packet", 8, 4, "no multi-node shapes"),
    ],
)
def test_unsupported_shapes_say_what_is_supported(name, world_size, per_node, fragment):
    with pytest.raises(InvalidArgumentError) as caught:
        compile_algorithm(name, world_size, per_node)
    assert fragment in str(caught.value)
    assert name in str(caught.value)


@pytest.mark.parametrize(
    ("name", "kwargs", "fragment"),
    [
        ("allreduce_rs_ag", {"instances": 0}, "instances must be an integer from 1 to 128"),
        ("allreduce_rs_ag", {"instances": 129}, "instances must be an integer from 1 to 128"),
        ("allreduce_rs_ag", {"instances": 2.0}, "instances must be an integer"),
        ("allreduce_rs_ag", {"inplace": "yes"}, "inplace must be True or False"),
        ("allreduce_rs_ag", {"plan_name": ""}, "name must be a non-empty string"),
        ("allreduce_rs_ag", {"iterations": 4}, "unknown option(s) iterations; it accepts max_message_size"),
        ("allreduce_rs_ag", {"min_message_size": -1}, "min_message_size must be a non-negative integer"),
        ("allreduce_rs_ag", {"min_message_size": 10, "max_message_size": 5}, "is larger than max_message_size"),
        ("allreduce_rs_ag", {"num_threads_per_block": 100}, "multiple of 32 from 32 to 1024"),
        ("allreduce_rs_ag_pipelined", {"iterations": 0}, "option iterations must be an integer from 1 to 1024"),
        ("broadcast", {"root": 4}, "option root must be an integer from 0 to 3"),
        ("broadcast", {"root": -1}, "option root must be an integer from 0 to 3"),
        ("reduce_read", {"root": 4}, "option root must be an integer from 0 to 3"),
        ("reduce_packet", {"root": -1}, "option root must be an integer from 0 to 3"),
    ],
)
def test_bad_arguments_name_the_argument(name, kwargs, fragment):
    with pytest.raises(InvalidArgumentError) as caught:
        compile_algorithm(name, 4, **kwargs)
    assert fragment in str(caught.value)


def test_options_reach_the_plan():
    plan = json.loads(
        compile_algorithm(
            "allreduce_rs_ag_pipelined",
            4,
            iterations=8,
            plan_name="my_allreduce",
            min_message_size=4096,
            max_message_size=1 << 24,
            num_threads_per_block=512,
        )
    )
    assert plan["name"] == "my_allreduce"
    assert (plan["min_message_bytes"], plan["max_message_bytes"]) == (4096, 1 << 24)
    assert plan["threads_per_block"] == 512
    pipelines = [op for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"] if op["op"] == "pipeline"]
    assert pipelines and all(op["iterations"] == 8 for op in pipelines)
    assert plan["metadata"]["parameters"]["options"]["iterations"] == 8
    broadcast = json.loads(compile_algorithm("broadcast", 4, root=2))
    assert broadcast["root"] == 2
    reduce = json.loads(compile_algorithm("reduce_read", 4, root=3))
    assert (reduce["collective"], reduce["root"]) == ("reduce", 3)


def test_options_change_the_source_hash():
    four = json.loads(compile_algorithm("allreduce_rs_ag_pipelined", 4))["metadata"]["source_hash"]
    eight = json.loads(compile_algorithm("allreduce_rs_ag_pipelined", 4, iterations=8))["metadata"]["source_hash"]
    other_rank = json.loads(compile_algorithm("allreduce_rs_ag_pipelined", 8))["metadata"]["source_hash"]
    assert len({four, eight, other_rank}) == 3


def test_default_names_describe_the_shape():
    assert json.loads(compile_algorithm("allgather_fullmesh", 8, 4, instances=2, inplace=True))["name"] == (
        "allgather_fullmesh_2x4_i2_inplace"
    )
    assert json.loads(compile_algorithm("sendrecv", 3))["name"] == "sendrecv_3r"


# Packets flow one way only here, so the receiver's word holds the senders back (reduce_packet.py says why).
ONE_WAY_PACKETS = {"reduce_packet"}


def test_packet_algorithms_use_no_signal_or_wait():
    for name in names():
        if get(name).protocol != "ll":
            continue
        shape = (4, None) if get(name).world_sizes else (4, 2)
        plan = json.loads(compile_algorithm(name, *shape))
        ops = {op["op"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in walk_ops(tb["ops"])}
        allowed = {"signal", "wait"} if name in ONE_WAY_PACKETS else set()
        assert not ops & ({"signal", "wait", "flush", "put", "put_with_signal"} - allowed), (name, ops)


def test_simple_algorithms_handshake_before_writing_a_peer():
    """The first op of every thread block that touches a channel is a relaxed sync, never a put."""
    for name in names():
        if get(name).protocol != "simple":
            continue
        shape = (4, None) if get(name).world_sizes else (4, 2)
        plan = json.loads(compile_algorithm(name, *shape))
        for gpu in plan["gpus"]:
            for tb in gpu["threadblocks"]:
                remote = [op for op in walk_ops(tb["ops"]) if op["op"] in ("signal", "wait") or op.get("dsts")]
                if remote:
                    first = remote[0]
                    assert first["op"] in ("signal", "wait") and first.get("relaxed"), (name, gpu["id"], first)
