"""A split communicator's all-reduce beside its parent's, through the NCCL API itself (ctypes), with no
torch.distributed in between: the parent made by ncclCommInitRank, the child by ncclCommSplit of the same
ranks (color 0, key = rank), both called on one stream, graph-replayed, in turns at every size. This isolates
what bench/nccl_bench.py --split cannot (there torch's group bookkeeping is part of each call):

    torchrun --nproc-per-node 2 bench/nccl_split_latency.py --library build/executor/nccl/libloom_nccl.so

Each library given (--library, and --nccl, plain NCCL, by default the one torch loads) is timed alike;
rank 0 prints one table, and --json writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from loom.tools.cuda_timing import time_graph
from nccl_api import NcclApi, torch_nccl  # beside this file
from nccl_bench import sizes  # beside this file: powers of two from --min-bytes to --max-bytes


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", required=True, help="libloom_nccl.so")
    parser.add_argument("--nccl", default="", help="plain libnccl.so.2 (default: the one torch ships with)")
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--calls-per-graph", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3, help="parent and child in turns this many times per size")
    parser.add_argument("--json", default="")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    def share_id(mine: bytes) -> bytes:
        box = [mine]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    paths = {"loom": args.library, "nccl": args.nccl or torch_nccl()}
    results: dict[str, list[dict]] = {}
    for name, path in paths.items():
        library = NcclApi(path, rank, world, share_id)
        child = library.split(0, rank)
        rows = []
        for size in sizes(args):
            tensor = torch.ones(size // 4, device="cuda")
            times = {"parent": [], "child": []}
            for _ in range(args.rounds):
                for which, comm in (("parent", library.comm), ("child", child)):
                    body = all_reduce_on(library, comm, tensor)
                    times[which].append(time_graph(body, args.calls_per_graph, args.repeats, dist.barrier))
            rows.append({"bytes": size, **{k: statistics.median(v) for k, v in times.items()}})
        results[name] = rows
        torch.cuda.synchronize()
        library.close()
    if rank == 0:
        print(f"{torch.cuda.get_device_name()}, {world} ranks, graph-replayed us per call (medians)")
        print("| size | Loom parent | Loom child | child/parent | NCCL parent | NCCL child |")
        print("|---:|---:|---:|---:|---:|---:|")
        for loom, nccl in zip(results["loom"], results["nccl"], strict=True):
            print(
                f"| {loom['bytes']} | {loom['parent']:.2f} | {loom['child']:.2f} | "
                f"{loom['child'] / loom['parent']:.2f} | {nccl['parent']:.2f} | {nccl['child']:.2f} |"
            )
        if args.json:
            Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(), **results}, indent=1))
    dist.destroy_process_group()


def all_reduce_on(library: NcclApi, comm, tensor):
    """One in-place all-reduce on `comm`, on the stream torch runs on then (the capture stream in a graph)."""
    import torch

    return lambda: library.all_reduce(tensor, tensor, torch.cuda.current_stream().cuda_stream, comm)


if __name__ == "__main__":
    main()
