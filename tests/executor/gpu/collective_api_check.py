"""loom.Communicator on GPUs with torch tensors: every collective selects a registered plan and matches
a float64 reference, eagerly and inside torch.cuda.graph capture (replayed on new data). One process
per GPU, or N ranks as threads sharing GPU 0:

    python -m loom.launch -n 2 tests/executor/gpu/collective_api_check.py
    python tests/executor/gpu/collective_api_check.py --share-gpu 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import loom
import torch
from loom import _native
from loom.compiler.driver import compile_algorithm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ranks  # noqa: E402

# (algorithm, in place, options): the plans the calls below need, registered as user plans.
PLANS = [
    ("allreduce_allpairs_packet", True, {}),
    ("allgather_fullmesh", False, {}),
    ("reducescatter_fullmesh", False, {}),
    ("alltoall_fullmesh", False, {}),
    ("broadcast", True, {"root": 0}),
    ("alltoallv_fullmesh", False, {}),  # send/recv: counted calls of the pair's plan
]


def check_rank(bootstrap, sharing: bool) -> int:
    if not sharing:  # the device is the current one (ranks.run set it from LOCAL_RANK), as with NCCL
        try:
            loom.Communicator(bootstrap, device=0)
            print(f"[rank {bootstrap.rank}] FAIL: two ranks on GPU 0 were not refused", flush=True)
        except loom.InvalidArgumentError as error:
            assert "both use GPU" in str(error), error
    comm = loom.Communicator(bootstrap)
    try:
        return check_calls(comm, bootstrap, sharing)
    except Exception:
        print(f"[rank {comm.rank}] device report: {comm.native.device_timeout_report()}", flush=True)
        raise


def check_calls(comm: loom.Communicator, bootstrap, sharing: bool) -> int:
    world, rank = comm.world_size, comm.rank
    device = 0 if sharing else rank
    assert comm.native.cuda_device == torch.cuda.current_device() == device, (comm.native.cuda_device, rank)
    for algorithm, inplace, options in PLANS:
        name = f"check_{algorithm}{'_inplace' if inplace else ''}"
        ranks_in_plan = 2 if algorithm.startswith("alltoallv") else world  # send/recv pairs: two-rank communicators
        text = compile_algorithm(
            algorithm,
            ranks_in_plan,
            inplace=inplace,
            plan_name=name,
            min_message_size=0,
            max_message_size=1 << 26,
            **options,
        )
        loom.register_plan(_native.Plan.parse(text), replace=True)  # ranks sharing a GPU share the registry
    count = 65536 * world + 8 * world  # pieces that end mid-vector
    failures = 0

    def inputs(seed):
        return [torch.randn(count, generator=torch.Generator().manual_seed(seed * 100 + r)) for r in range(world)]

    def check(what, got, expected):
        nonlocal failures
        error = (got.double().cpu() - expected).abs().max().item()
        if error > 1e-4:
            failures += 1
            print(f"[rank {rank}] FAIL {what}: max error {error}", flush=True)

    # Eager calls.
    data = inputs(1)
    total = sum(x.double() for x in data)
    piece = count // world
    t = data[rank].cuda()
    comm.all_reduce(t)
    check("all_reduce", t, total)
    out = torch.empty(count * world, device="cuda")
    comm.all_gather(out, data[rank].cuda())
    check("all_gather", out, torch.cat(data).double())
    out = torch.empty(piece, device="cuda")
    comm.reduce_scatter(out, data[rank].cuda())
    check("reduce_scatter", out, total[rank * piece : (rank + 1) * piece])
    out = torch.empty(count, device="cuda")
    comm.all_to_all(out, data[rank].cuda())
    check("all_to_all", out, torch.cat([x[rank * piece : (rank + 1) * piece] for x in data]).double())
    t = data[rank].cuda()
    comm.broadcast(t, root=0)
    check("broadcast", t, data[0].double())

    print(f"[rank {rank}] eager collectives done", flush=True)
    # send/recv around a ring: even ranks send first, odd ranks receive first. With more than 2 ranks each
    # pair runs over its own two-rank communicator; with 2, the same path is taken once explicitly.
    after, before = (rank + 1) % world, (rank - 1) % world
    ring_communicators = [comm] if world > 2 else [comm, comm._pair_with(after)]
    for ring in ring_communicators:
        inbox = torch.empty(count, device="cuda")
        outgoing = data[rank].cuda()
        if rank % 2 == 0:
            ring.send(outgoing, peer=after if ring is comm else 1 - ring.rank)
            ring.recv(inbox, peer=before if ring is comm else 1 - ring.rank)
        else:
            ring.recv(inbox, peer=before if ring is comm else 1 - ring.rank)
            ring.send(outgoing, peer=after if ring is comm else 1 - ring.rank)
        check(f"send/recv ({'job' if ring is comm else 'pair'} communicator)", inbox, data[before].double())

    print(f"[rank {rank}] send/recv done", flush=True)
    # Inside a CUDA graph: capture once, replay on fresh data copied into the captured buffers.
    source = torch.empty(count, device="cuda")
    reduced = torch.empty(count, device="cuda")
    gathered = torch.empty(count * world, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        reduced.copy_(source)
        comm.all_reduce(reduced)  # warm-up outside capture: setup happens here
        comm.all_gather(gathered, source)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with ranks.capture(graph):
        reduced.copy_(source)
        comm.all_reduce(reduced)
        comm.all_gather(gathered, source)
    for replay in range(5):
        data = inputs(10 + replay)
        source.copy_(data[rank].cuda())
        graph.replay()
        ranks.synchronize()
        check(f"graph all_reduce replay {replay}", reduced, sum(x.double() for x in data))
        check(f"graph all_gather replay {replay}", gathered, torch.cat(data).double())
    print(f"[rank {rank}] collective API: {failures} failures; registry {loom.registry.stats()}", flush=True)
    return failures


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    ranks.add_arguments(parser)
    arguments_given = parser.parse_args()
    sys.exit(ranks.run(arguments_given, lambda bootstrap: check_rank(bootstrap, bool(arguments_given.share_gpu))))
