"""loom.Communicator.split on GPUs with torch tensors (issue 38): the ranks split by the colors given (keys
reverse each group's order), and each group runs every collective on the plans of its own size (bundled ones,
or for a size with none, plans the JIT compiles on first use) against a float64 reference on fresh data,
eagerly and replayed from a CUDA graph; then the whole job runs one all-reduce again. One process per GPU
(the groups run side by side), or N ranks as threads sharing GPU 0 (the groups take turns: check_rank says
why):

    python tests/executor/gpu/subgroup_check.py --share-gpu 4 --colors 0,1,0,1

With ``--port-plans`` (needs CUDA_MODULE_LOADING=EAGER, as port channels between GPUs of one host do) the
parent and each group also run a port-channel all-to-all (``alltoall_port``) in turns, sharing one proxy
per rank (the stats' ``proxy_sharers``), and the parent's runs on after the group is aborted:

    CUDA_MODULE_LOADING=EAGER python -m loom.launch -n 2 tests/executor/gpu/subgroup_check.py --colors 0,0 --port-plans
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import loom
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ranks  # noqa: E402


def port_plan(world_size: int):
    from loom.compiler.driver import compile_algorithm

    return loom.Plan.parse(compile_algorithm("alltoall_port", world_size, min_message_size=0))


def run_all_to_all(communicator, plan, data: list, me: int, on_default_stream: bool = False) -> torch.Tensor:
    """The port plan on a stream of its own, not the legacy default stream: its proxy moves data with CUDA
    calls while the kernel waits, and work the host queues on the default stream behind that kernel (this
    check's own copy of the result) can hold the proxy's copies back until the device timeout (a 2 x H200 run
    of 2026-11-29 hung so once in turn 1; docs/executor.md, limits). `on_default_stream` runs it there, to
    reproduce that."""
    if on_default_stream:
        out = torch.empty_like(data[0], device="cuda")
        communicator.executor.execute(plan, data[me].cuda(), out)
        return out
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = torch.empty_like(data[0], device="cuda")
        communicator.executor.execute(plan, data[me].cuda(), out)
    side.synchronize()
    return out


def check_rank(
    bootstrap,
    colors: list[int],
    sizes: list[int],
    port_plans: bool = False,
    one_group_at_a_time: bool = False,
    port_on_default_stream: bool = False,
) -> int:
    comm = loom.Communicator(bootstrap)
    rank, world = comm.rank, comm.world_size
    group = comm.split(colors[rank], key=-rank)
    members = group.parent_ranks
    size, me = group.world_size, group.rank
    assert members == sorted((r for r in range(world) if colors[r] == colors[rank]), reverse=True), members
    failures = 0

    def check(what, got, expected):
        nonlocal failures
        error = ((got.double().cpu() - expected).norm() / expected.norm().clamp_min(1e-30)).item()
        if not error <= 1e-5:
            failures += 1
            print(f"[rank {rank}] FAIL group of {size}, {what}: relative error {error}", flush=True)

    def run_group(barrier) -> None:
        """Every collective on the group against float64, then a graph of it replayed on fresh data."""
        for seed, per_rank in enumerate(sizes):
            count = per_rank * size
            data = [torch.randn(count, generator=torch.Generator().manual_seed(97 * seed + r)) for r in members]
            total = sum(x.double() for x in data)
            piece = count // size
            t = data[me].cuda()
            group.all_reduce(t)
            check(f"all_reduce of {count}", t, total)
            out = torch.empty(count * size, device="cuda")
            group.all_gather(out, data[me].cuda())
            check(f"all_gather of {count}", out, torch.cat(data).double())
            out = torch.empty(piece, device="cuda")
            group.reduce_scatter(out, data[me].cuda())
            check(f"reduce_scatter of {count}", out, total[me * piece : (me + 1) * piece])
            out = torch.empty(count, device="cuda")
            group.all_to_all(out, data[me].cuda())
            check(f"all_to_all of {count}", out, torch.cat([x[me * piece : (me + 1) * piece] for x in data]).double())
            t = data[me].cuda()
            group.broadcast(t, root=0)
            check(f"broadcast of {count}", t, data[0].double())

        # A graph replayed on fresh data: the group's plans keep their per-call state on the device.
        count = sizes[0] * size
        source = torch.empty(count, device="cuda")
        reduced = torch.empty(count, device="cuda")
        reduced.copy_(source)
        group.all_reduce(reduced)  # outside capture: set-up happens here
        ranks.synchronize()
        # Every group's set-up done before any captures: ranks sharing a GPU are threads of one process, and a
        # set-up's device-wide wait in another group would invalidate this thread's capture.
        barrier()
        graph = torch.cuda.CUDAGraph()
        with ranks.capture(graph):
            reduced.copy_(source)
            group.all_reduce(reduced)
        barrier()
        for replay in range(3):
            data = [torch.randn(count, generator=torch.Generator().manual_seed(500 + 10 * replay + r)) for r in members]
            source.copy_(data[me].cuda())
            graph.replay()
            ranks.synchronize()
            check(f"graph all_reduce replay {replay}", reduced, sum(x.double() for x in data))

    if one_group_at_a_time:
        # Ranks sharing one GPU: the groups take turns. Running side by side, one group's set-up (a cudaMalloc
        # or cudaFree waits for the whole device) can wait for the other group's kernels, which wait for one of
        # their ranks that is in such a call of its own: both stall until the device timeout traps.
        for turn in sorted(set(colors)):
            bootstrap.barrier()
            if colors[rank] == turn:
                run_group(group.bootstrap.barrier)
            ranks.synchronize()
        bootstrap.barrier()
    else:
        run_group(bootstrap.barrier)

    if port_plans:
        plans = {n: port_plan(n) for n in {world, size}}
        count = sizes[0] * world * size
        for turn in range(2):
            for who, communicator, order in (("parent", comm, list(range(world))), ("group", group, members)):
                n = len(order)
                mine = order.index(rank)
                data = [torch.randn(count, generator=torch.Generator().manual_seed(700 + 10 * turn + r)) for r in order]
                out = run_all_to_all(communicator, plans[n], data, mine, port_on_default_stream)
                piece = count // n
                expected = torch.cat([x[mine * piece : (mine + 1) * piece] for x in data]).double()
                check(f"{who}'s port all_to_all, turn {turn}", out, expected)
        sharers = (comm.executor.stats()["proxy_sharers"], group.executor.stats()["proxy_sharers"])
        if sharers != (2, 2):
            failures += 1
            print(f"[rank {rank}] FAIL the parent and its group share no proxy: proxy_sharers {sharers}", flush=True)

    whole = [torch.randn(sizes[0], generator=torch.Generator().manual_seed(900 + r)) for r in range(world)]
    t = whole[rank].cuda()
    comm.all_reduce(t)
    check("the parent's all_reduce after the split", t, sum(x.double() for x in whole))
    ranks.synchronize()
    group.abort()
    if port_plans:
        data = [torch.randn(sizes[0] * world, generator=torch.Generator().manual_seed(990 + r)) for r in range(world)]
        out = run_all_to_all(comm, plans[world], data, rank, port_on_default_stream)
        piece = sizes[0]
        check(
            "the parent's port all_to_all after the group's abort",
            out,
            torch.cat([x[rank * piece : (rank + 1) * piece] for x in data]).double(),
        )
        ranks.synchronize()
    print(f"[rank {rank}] group {me}/{size} of ranks {members}: {failures} failures", flush=True)
    return failures


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    ranks.add_arguments(parser)
    parser.add_argument("--colors", required=True, help="one color per rank, comma-separated")
    parser.add_argument(
        "--sizes",
        default="1000,65538,1048576",
        help="elements per rank of each call, comma-separated (default: %(default)s)",
    )
    parser.add_argument("--port-plans", action="store_true", help="also port-channel all-to-alls on a shared proxy")
    parser.add_argument(
        "--port-default-stream",
        action="store_true",
        help="run the port all-to-alls on the legacy default stream (reproduces the hang docs/executor.md names)",
    )
    arguments = parser.parse_args()
    colors = [int(text) for text in arguments.colors.split(",")]
    sizes = [int(text) for text in arguments.sizes.split(",")]
    sys.exit(
        ranks.run(
            arguments,
            lambda bootstrap: check_rank(
                bootstrap,
                colors,
                sizes,
                arguments.port_plans,
                bool(arguments.share_gpu),
                arguments.port_default_stream,
            ),
        )
    )
