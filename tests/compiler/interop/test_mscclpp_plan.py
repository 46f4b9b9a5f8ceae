"""loom import: MSCCL++ execution plans (small ones written here, in MSCCL++'s JSON layout) become
Loom plans that pass the schema, the C++ decoder where built, the plan verifier and, where the native
module is built, a run on the CPU backend; malformed or untranslatable input names its JSON path."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from loom.errors import InvalidArgumentError
from loom.interop import convert_mscclpp_plan, import_mscclpp_plan
from loom.plan.schema import check_schema
from loom.tools import cli
from loom.verify import VerificationError, verify


def _local(kind: str, index: int, size: int = 1) -> dict:
    return {"type": kind, "index": index, "size": size}


def _remote(buffer_id: int, index: int, size: int = 1) -> dict:
    return {"buffer_id": buffer_id, "index": index, "size": size}


def packet_allreduce() -> dict:
    """2 ranks, out of place, LL: rank r sends input[1-r] as packets to the peer's scratch[0], sums
    input[r] with the peer's packets into output[r] and sends the sum to the peer's scratch[1], then
    unpacks the peer's sum from its own scratch[1] into output[1-r]."""
    gpus = []
    for rank in range(2):
        ops = [
            {
                "name": "ppkt",
                "src_buff": [_local("i", 1 - rank)],
                "dst_buff": [_remote(0, 0)],
                "channel_type": "memory",
            },
            {
                "name": "respkt",
                "src_buff": [_local("i", rank), _local("s", 0)],
                "dst_buff": [_local("o", rank), _remote(0, 1)],
                "channel_type": "memory",
                "reduce_op": "sum",
            },
            {"name": "upkt", "src_buff": [_local("s", 1)], "dst_buff": [_local("o", 1 - rank)]},
        ]
        gpus.append(
            {
                "id": rank,
                "input_chunks": 2,
                "output_chunks": 2,
                "scratch_chunks": 2,
                "threadblocks": [
                    {
                        "id": 0,
                        "ops": ops,
                        "channels": [{"channel_type": "memory", "channel_ids": [0]}],
                        "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}],
                    }
                ],
                "channels": [{"channel_type": "memory", "connected_to": [1 - rank]}],
                "remote_buffers": [{"rank": 1 - rank, "type": "s", "access_channel_types": ["memory"]}],
                "semaphores": [],
            }
        )
    return {
        "name": "allreduce_pkt_2r",
        "collective": "allreduce",
        "protocol": "LL",
        "inplace": False,
        "reuse_resources": False,
        "num_threads_per_block": 256,
        "use_double_scratch_buffer": True,
        "buffer_alignment": 16,
        "min_message_size": 0,
        "max_message_size": 2**64 - 1,
        "gpus": gpus,
    }


def put_allgather(groups: int = 1) -> dict:
    """2 ranks, out of place, Simple: rank r waits until the peer is in this call (a relaxed
    handshake: its output is no longer the user's), copies input[0] to output[r], puts it into the
    peer's output[r], signals and waits. With ``groups`` > 1 the same work is split over that many thread
    blocks with tbg_info, each with its own channel."""
    gpus = []
    for rank in range(2):
        blocks = []
        for tb in range(groups):
            tbg = {"tbg_info": {"tb_id": tb, "tbg_size": groups}} if groups > 1 else {}
            ops = [
                {"name": "rlxsignal", "channel_ids": [0], "channel_type": "memory"},
                {"name": "rlxwait", "channel_ids": [0], "channel_type": "memory"},
                {"name": "copy", "src_buff": [_local("i", 0)], "dst_buff": [_local("o", rank)], **tbg},
                {
                    "name": "put",
                    "src_buff": [_local("i", 0)],
                    "dst_buff": [_remote(0, rank)],
                    "channel_ids": [0],
                    "channel_type": "memory",
                    **tbg,
                },
                {"name": "signal", "channel_ids": [0], "channel_type": "memory"},
                {"name": "wait", "channel_ids": [0], "channel_type": "memory"},
            ]
            blocks.append(
                {
                    "id": tb,
                    "ops": ops,
                    "channels": [{"channel_type": "memory", "channel_ids": [tb]}],
                    "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}],
                }
            )
        gpus.append(
            {
                "id": rank,
                "input_chunks": 1,
                "output_chunks": 2,
                "scratch_chunks": 0,
                "threadblocks": blocks,
                "channels": [{"channel_type": "memory", "connected_to": [1 - rank] * groups}],
                "remote_buffers": [{"rank": 1 - rank, "type": "o", "access_channel_types": ["memory"]}],
            }
        )
    return {
        "name": "allgather_put_2r",
        "collective": "allgather",
        "protocol": "Simple",
        "inplace": False,
        "num_threads_per_block": 512,
        "buffer_alignment": 16,
        "min_message_size": 64,
        "max_message_size": 1 << 30,
        "gpus": gpus,
    }


def test_packet_allreduce_imports_to_a_verified_plan():
    plan = json.loads(import_mscclpp_plan(packet_allreduce()))
    check_schema(plan, "imported")
    assert verify(plan) == []
    assert (plan["protocol"], plan["threads_per_block"], plan["max_message_bytes"]) == ("ll", 256, 2**53 - 1)
    ops = plan["gpus"][1]["threadblocks"][0]["ops"]
    assert ops[0] == {
        "op": "put_packet",
        "src": {"buffer": "input", "index": 0},
        "dsts": [{"channel": 0, "buffer": "scratch", "index": 0}],
    }
    assert ops[1] == {
        "op": "reduce_send_packet",
        "reduce_op": "sum",
        "src": {"buffer": "input", "index": 1},
        "srcs": [{"buffer": "scratch", "index": 0}],
        "dst": {"buffer": "output", "index": 1},
        "dsts": [{"channel": 0, "buffer": "scratch", "index": 1}],
    }
    assert ops[2]["op"] == "unpack_packet"
    assert plan["metadata"]["parameters"]["use_double_scratch_buffer"] is True


def test_put_allgather_imports_with_message_sizes_per_input():
    plan = json.loads(import_mscclpp_plan(put_allgather()))
    assert verify(plan) == []
    # MSCCL++ sizes an all-gather by its output, Loom by its input.
    assert (plan["min_message_bytes"], plan["max_message_bytes"]) == (32, 1 << 29)
    assert [op["op"] for op in plan["gpus"][0]["threadblocks"][0]["ops"]] == [
        "signal",
        "wait",
        "copy",
        "put",
        "signal",
        "wait",
    ]
    assert plan["gpus"][0]["threadblocks"][0]["ops"][0] == {"op": "signal", "channels": [0], "relaxed": True}
    assert plan["gpus"][0]["threadblocks"][0]["ops"][3]["dsts"] == [{"channel": 0, "buffer": "output", "index": 0}]


def test_thread_block_groups_become_finer_chunks():
    plan = json.loads(import_mscclpp_plan(put_allgather(groups=2)))
    assert verify(plan) == []
    rank1 = plan["gpus"][1]
    assert (rank1["input_chunks"], rank1["output_chunks"]) == (2, 4)
    puts = [block["ops"][3] for block in rank1["threadblocks"]]
    assert [put["src"] for put in puts] == [{"buffer": "input", "index": 0}, {"buffer": "input", "index": 1}]
    assert [put["dsts"][0] for put in puts] == [
        {"channel": 0, "buffer": "output", "index": 2},
        {"channel": 1, "buffer": "output", "index": 3},
    ]


def test_unpaired_channels_get_their_other_end():
    data = put_allgather()
    data["gpus"][0]["channels"][0]["connected_to"] = [1, 1]  # rank 1 declares one back
    plan = convert_mscclpp_plan(data)
    assert [len(gpu["channels"]) for gpu in plan["gpus"]] == [2, 2]


def test_a_racy_plan_fails_verification():
    data = put_allgather()
    del data["gpus"][0]["threadblocks"][0]["ops"][5]  # rank 0 no longer waits for rank 1's put
    with pytest.raises(VerificationError):
        import_mscclpp_plan(data)
    assert json.loads(import_mscclpp_plan(data, verify=False))["name"] == "allgather_put_2r"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["gpus"][0]["threadblocks"][0]["ops"][1].update(name="xyz"),
            'gpus[0].threadblocks[0].ops[1].name: "xyz" is not an MSCCL++ op Loom can import',
        ),
        (
            lambda d: d["gpus"][1]["threadblocks"][0]["ops"][0].pop("src_buff"),
            "gpus[1].threadblocks[0].ops[0].src_buff: missing required field",
        ),
        (
            lambda d: d["gpus"][0]["threadblocks"][0]["ops"][0]["dst_buff"][0].update(buffer_id=3),
            "gpus[0].threadblocks[0].ops[0].dst_buff[0].buffer_id: 3 is out of range: thread block 0 lists "
            "1 remote buffer(s) for memory channels",
        ),
        (
            lambda d: d["gpus"][1]["threadblocks"][0]["remote_buffer_refs"][0].update(remote_buffer_ids=[4]),
            "gpus[1].threadblocks[0].remote_buffer_refs[0].remote_buffer_ids[0]: 4 is out of range: "
            "the rank declares 1 remote buffer(s)",
        ),
        (
            lambda d: d["gpus"][0]["threadblocks"][0]["ops"][1]["src_buff"][1].update(type="x"),
            'gpus[0].threadblocks[0].ops[1].src_buff[1].type: "x" is not one of "i", "o", "s"',
        ),
        (
            lambda d: d["gpus"][0]["threadblocks"][0]["ops"][2]["src_buff"][0].update(type="i"),
            'gpus[0].threadblocks[0].ops[2].src_buff[0].type: "i" here must be "s"',
        ),
        (
            lambda d: d["gpus"][0]["threadblocks"][0]["ops"][2]["src_buff"][0].update(rank=1),
            "gpus[0].threadblocks[0].ops[2].src_buff[0].rank: a local reference of rank 0 names rank 1",
        ),
        (lambda d: d.update(protocol="ll"), 'protocol: "ll" is not one of "Simple", "LL"'),
        (lambda d: d.update(collective="broadcast"), 'collective: "broadcast" is not one of'),
        (lambda d: d["gpus"][1].update(id=0), "gpus[1].id: rank 0 is listed twice (also gpus[0])"),
        (lambda d: d["gpus"][0].update(extra=1), "gpus[0].extra: unknown field"),
        (
            lambda d: d["gpus"][0]["threadblocks"][0]["ops"].append({"name": "pipeline", "ops": []}),
            "gpus[0].threadblocks[0].ops[3].iter_context: missing",
        ),
        (
            lambda d: d["gpus"][0]["threadblocks"][0]["ops"].append(
                {"name": "pipeline", "iter_context": {"unit_size": 1000, "num_chunks": 1}, "ops": []}
            ),
            "gpus[0].threadblocks[0].ops[3].iter_context.unit_size: a Loom pipeline slices in multiples of 16 bytes",
        ),
        (
            lambda d: d["gpus"][0]["channels"].append({"channel_type": "switch", "buff": "i", "rank_groups": []}),
            "gpus[0].channels[1].rank_groups: expected a non-empty array",
        ),
        (
            lambda d: d["gpus"][0]["channels"].append(
                {"channel_type": "switch", "buffer_type": "i", "rank_groups": [{"size": 1, "ranks": [1]}]}
            ),
            "gpus[0].channels[1].rank_groups[0].ranks: the group of rank 0's switch channel does not hold rank 0",
        ),
    ],
)
def test_errors_name_the_mscclpp_json_path(mutate, message):
    data = copy.deepcopy(packet_allreduce())
    mutate(data)
    with pytest.raises(InvalidArgumentError) as caught:
        import_mscclpp_plan(data)
    assert message in str(caught.value)


def test_packet_ops_need_the_ll_protocol():
    data = packet_allreduce()
    data["protocol"] = "Simple"
    with pytest.raises(InvalidArgumentError, match=r"ops\[0\]\.name: packet op \"ppkt\" needs the LL protocol"):
        import_mscclpp_plan(data)


def test_put_channel_must_reach_the_buffer_owner():
    data = put_allgather()
    data["gpus"][0]["remote_buffers"][0]["rank"] = 0
    with pytest.raises(InvalidArgumentError, match=r"gpus\[0\]\.remote_buffers\[0\]\.rank: rank 0 lists its own"):
        import_mscclpp_plan(data)


def test_cli_import_writes_the_plan_and_reports_errors(tmp_path, capsys):
    source = tmp_path / "ag.json"
    source.write_text(json.dumps(put_allgather()))
    out = tmp_path / "loom.json"
    assert cli.main(["import", str(source), "-o", str(out), "--name", "ag_imported"]) == 0
    assert json.loads(out.read_text())["name"] == "ag_imported"
    assert out.read_text() == import_mscclpp_plan(put_allgather(), name="ag_imported")

    bad = put_allgather()
    bad["gpus"][0]["threadblocks"][0]["ops"][2]["name"] = "zz"
    source.write_text(json.dumps(bad))
    assert cli.main(["import", str(source)]) == 1
    assert f'loom import: {source}: gpus[0].threadblocks[0].ops[2].name: "zz"' in capsys.readouterr().err

    racy = put_allgather()
    del racy["gpus"][0]["threadblocks"][0]["ops"][5]
    source.write_text(json.dumps(racy))
    assert cli.main(["import", str(source), "-o", str(out)]) == 1
    assert "--no-verify writes the plan anyway" in capsys.readouterr().err
    assert cli.main(["import", str(source), "-o", str(out), "--no-verify"]) == 0


@pytest.mark.parametrize("build", [packet_allreduce, put_allgather], ids=["packet_allreduce", "put_allgather"])
def test_imported_plan_runs_on_the_cpu_backend(build):
    native = pytest.importorskip("loom._native", reason="the native module is not built")
    import loom
    from loom.runtime.host_ranks import run_ranks

    plan = native.Plan.parse(import_mscclpp_plan(build(), verify=False))
    count = 1000
    rng = np.random.default_rng(7)
    inputs = [rng.integers(-1000, 1000, count).astype(np.int32) for _ in range(2)]
    expected = sum(inputs) if plan.collective == "allreduce" else np.concatenate(inputs)

    def body(bootstrap):
        communicator = native.Communicator(bootstrap, host_only=True)
        executor = loom.Executor(communicator, verified=False)
        outputs = []
        for _ in range(3):  # the LL flag and scratch halves alternate between calls
            source = inputs[communicator.rank].copy()
            target = np.zeros(expected.size, np.int32)
            executor.execute(plan, source, target)
            outputs.append(target)
        return outputs

    results = run_ranks(2, native.UniqueId.create("127.0.0.1"), body, timeout_ms=20000)
    for rank in range(2):
        if isinstance(results[rank], BaseException):
            raise results[rank]
        for got in results[rank]:
            assert np.array_equal(got, expected)


def port_packet_allgather() -> dict:
    """2 ranks (2 nodes of 1), LL, all-gather over port channels the way MSCCL++'s multi-node plans
    do it: pack input[0] into scratch[0] (cpkt), send the packed scratch (ppkt on a port channel: the
    packets as they are), copy input[0] to output[r], unpack the peer's packets from scratch[1]."""
    gpus = []
    for rank in range(2):
        ops = [
            {"name": "cpkt", "src_buff": [_local("i", 0)], "dst_buff": [_local("s", 0)]},
            {
                "name": "ppkt",
                "src_buff": [_local("s", 0)],
                "dst_buff": [_remote(0, 1)],
                "channel_ids": [0],
                "channel_type": "port",
            },
            {"name": "copy", "src_buff": [_local("i", 0)], "dst_buff": [_local("o", rank)]},
            {"name": "upkt", "src_buff": [_local("s", 1)], "dst_buff": [_local("o", 1 - rank)]},
        ]
        gpus.append(
            {
                "id": rank,
                "input_chunks": 1,
                "output_chunks": 2,
                "scratch_chunks": 2,
                "threadblocks": [
                    {
                        "id": 0,
                        "ops": ops,
                        "channels": [{"channel_type": "port", "channel_ids": [0]}],
                        "remote_buffer_refs": [{"access_channel_type": "port", "remote_buffer_ids": [0]}],
                    }
                ],
                "channels": [{"channel_type": "port", "connected_to": [1 - rank]}],
                "remote_buffers": [{"rank": 1 - rank, "type": "s", "access_channel_types": ["port"]}],
                "semaphores": [],
            }
        )
    plan = copy.deepcopy(packet_allreduce())
    plan.update({"name": "allgather_port_pkt_2r", "collective": "allgather", "gpus": gpus})
    return plan


def test_a_port_channel_packet_send_from_scratch_forwards_the_packets():
    plan = json.loads(import_mscclpp_plan(port_packet_allgather(), ranks_per_node=1))
    names = [op["op"] for op in plan["gpus"][0]["threadblocks"][0]["ops"]]
    assert names == ["copy_packet", "read_put_packet", "copy", "unpack_packet"], names


def test_a_test_collective_plan_imports_with_buffers_of_no_chunks():
    plan = copy.deepcopy(packet_allreduce())
    plan.update({"name": "signal_wait_test", "collective": "test"})
    for gpu in plan["gpus"]:
        gpu.update({"input_chunks": 0, "output_chunks": 0, "scratch_chunks": 0})
        gpu["threadblocks"][0]["ops"] = [
            {"name": "signal", "channel_ids": [0], "channel_type": "memory"},
            {"name": "wait", "channel_ids": [0], "channel_type": "memory"},
        ]
        gpu["remote_buffers"], gpu["threadblocks"][0]["remote_buffer_refs"] = [], []
    imported = json.loads(import_mscclpp_plan(plan))
    assert imported["collective"] == "test" and imported["gpus"][0]["output_chunks"] == 0


def test_a_pipeline_imports_sized_in_bytes():
    """MSCCL++'s pipeline (iter_context: unit_size bytes per iteration) becomes a Loom pipeline with
    unit_bytes; the verifier runs it at several units."""
    data = put_allgather()
    for gpu in data["gpus"]:
        ops = gpu["threadblocks"][0]["ops"]
        ops[2:4] = [{"name": "pipeline", "iter_context": {"unit_size": 4096, "num_chunks": 1}, "ops": ops[2:4]}]
    plan = json.loads(import_mscclpp_plan(data))
    check_schema(plan, "imported")
    assert verify(plan) == []
    pipeline = plan["gpus"][0]["threadblocks"][0]["ops"][2]
    assert pipeline["op"] == "pipeline" and pipeline["unit_bytes"] == 4096
    assert [op["op"] for op in pipeline["body"]] == ["copy", "put"]
    data["gpus"][0]["threadblocks"][0]["ops"][2]["iter_context"]["num_chunks"] = 2
    with pytest.raises(InvalidArgumentError) as caught:
        import_mscclpp_plan(data)
    assert "ops[2].iter_context.num_chunks: 2 chunk(s), but the longest range in the pipeline's ops has 1" in str(
        caught.value
    )


def nvls_allreduce() -> dict:
    """2 ranks, in place: a relaxed handshake, then each rank load-reduces its chunk over the switch
    channel's group and stores the sum to every member (glres), then a plain handshake that publishes it."""
    gpus = []
    for rank in range(2):
        handshake = [
            {"name": "rlxsignal", "channel_ids": [0], "channel_type": "memory"},
            {"name": "rlxwait", "channel_ids": [0], "channel_type": "memory"},
        ]
        # The last handshake publishes the sums: a plain signal and wait (a relaxed one orders only the count).
        publish = [
            {"name": "signal", "channel_ids": [0], "channel_type": "memory"},
            {"name": "wait", "channel_ids": [0], "channel_type": "memory"},
        ]
        chunk = {"switch_channel_id": 0, "index": rank, "size": 1}
        glres = {"name": "glres", "src_buff": [chunk], "dst_buff": [chunk], "channel_type": "switch"}
        glres["reduce_op"] = "sum"
        gpus.append(
            {
                "id": rank,
                "input_chunks": 2,
                "output_chunks": 2,
                "scratch_chunks": 0,
                "threadblocks": [
                    {
                        "id": 0,
                        "ops": [*handshake, glres, *publish],
                        "channels": [
                            {"channel_type": "memory", "channel_ids": [0]},
                            {"channel_type": "switch", "channel_ids": [0]},
                        ],
                        "remote_buffer_refs": [],
                    }
                ],
                "channels": [
                    {"channel_type": "memory", "connected_to": [1 - rank]},
                    {"channel_type": "switch", "buffer_type": "i", "rank_groups": [{"size": 2, "ranks": [0, 1]}]},
                ],
                "remote_buffers": [],
            }
        )
    return {
        "name": "allreduce_nvls_2r",
        "collective": "allreduce",
        "protocol": "Simple",
        "inplace": True,
        "num_threads_per_block": 1024,
        "min_message_size": 0,
        "max_message_size": 1 << 30,
        "gpus": gpus,
    }


def test_nvls_switch_channels_and_their_ops_import_and_verify():
    """A switch channel becomes a Loom switch channel (its group, its buffer); glres becomes one
    multimem_reduce that stores the result to every member (dsts), as Loom's own fusion writes it."""
    plan = json.loads(import_mscclpp_plan(nvls_allreduce()))
    check_schema(plan, "imported")
    assert verify(plan) == []
    assert plan["gpus"][1]["channels"][1] == {"id": 1, "type": "switch", "ranks": [0, 1], "buffer": "input"}
    ops = plan["gpus"][1]["threadblocks"][0]["ops"]
    assert ops[2] == {
        "op": "multimem_reduce",
        "reduce_op": "sum",
        "src": {"channel": 1, "buffer": "input", "index": 1},
        "dsts": [{"channel": 1, "buffer": "input", "index": 1}],
    }
    assert ops[3]["op"] != "multimem_broadcast"
