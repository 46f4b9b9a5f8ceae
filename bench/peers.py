"""Loom beside the strongest peers on the same GPUs, in the same processes (issue 40): NCCL (torch.distributed),
PyTorch's symmetric-memory kernels, and Loom's own pick (``loom.Communicator``, the bundled plans). One process
per GPU, under torchrun (torch.distributed and Loom's bootstrap both read its variables):

    torchrun --nproc-per-node 2 bench/peers.py --out peers.json [--dtypes bfloat16,float32] [--modes graph,eager]

Per collective, size, dtype and mode it prints the median microseconds of each peer and writes them as JSON.
Every peer's result is checked against NCCL's on the same input first (a peer that disagrees is reported and
not timed). PyTorch symmetric memory: ``one_shot_all_reduce_out`` and ``two_shot_all_reduce_out`` on buffers
from ``symm_mem.empty`` + ``rendezvous``, and any reduce-scatter or all-gather kernel this torch has that needs
no multicast (NVLS stays off: TORCH_SYMM_MEM_DISABLE_MULTICAST=1). Any library with NCCL's API joins with
``--nccl-api NAME=PATH``, called through ctypes (bench/nccl_api.py): MSCCL++'s libmscclpp_nccl.so, built offline
by scripts/mscclpp_build.sh.
"""

# The timed lambdas run within the loop iteration that defines them (ruff B023 does not see that).
# ruff: noqa: B023

from __future__ import annotations

import argparse
from collections.abc import Callable

import loom
import torch
import torch.distributed as dist
import torch_ranks  # beside this file
from loom import _native
from loom.tools.cuda_timing import time_eager, time_graph
from nccl_api import NcclApi  # beside this file
from nccl_bench import sizes  # beside this file: powers of two from --min-bytes to --max-bytes

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "reduce")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--modes", default="graph,eager")
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=1 << 30)
    parser.add_argument("--calls-per-graph", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--nccl-api",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="another library with NCCL's API as a peer, called through ctypes (bench/nccl_api.py), e.g."
        " mscclpp=build-mscclpp/build/lib/libmscclpp_nccl.so; repeatable",
    )
    parser.add_argument("--out", default="")
    return parser.parse_args()


class SymmetricMemory:
    """PyTorch's symmetric-memory kernels on buffers of one size, or None where torch lacks them."""

    def __init__(self, group_name: str) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        self.symm_mem = symm_mem
        self.group_name = group_name
        self.ops = torch.ops.symm_mem
        self.buffers: dict[tuple, torch.Tensor] = {}

    def buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        key = (numel, dtype)
        if key not in self.buffers:
            tensor = self.symm_mem.empty(numel, dtype=dtype, device="cuda")
            self.symm_mem.rendezvous(tensor, self.group_name)
            self.buffers[key] = tensor
        return self.buffers[key]

    def kernels(self, collective: str) -> dict[str, Callable]:
        """name -> fn(symmetric input, output) returning the tensor that holds the result (the input itself for
        the in-place two-shot kernel, whose repeated calls keep summing into it: harmless to its time)."""
        ops, group = self.ops, self.group_name
        found: dict[str, Callable] = {}
        if collective == "allreduce":
            if hasattr(ops, "one_shot_all_reduce_out"):
                found["symm one-shot"] = lambda src, out: ops.one_shot_all_reduce_out(src, "sum", group, out)
            if hasattr(ops, "two_shot_all_reduce_out"):
                found["symm two-shot out"] = lambda src, out: ops.two_shot_all_reduce_out(src, "sum", group, out)
            if hasattr(ops, "two_shot_all_reduce_"):
                found["symm two-shot in place"] = lambda src, out: ops.two_shot_all_reduce_(src, "sum", group)
        elif collective == "reducescatter" and hasattr(ops, "reduce_scatter_out"):
            found["symm reduce-scatter"] = lambda src, out: ops.reduce_scatter_out(src, group, False, out)
        return found


def main() -> None:
    args = arguments()
    world, rank = torch_ranks.start()
    comm = loom.Communicator(_native.Bootstrap.from_environment())
    symm = SymmetricMemory(dist.group.WORLD.group_name)
    apis = {}
    for entry in args.nccl_api:
        name, _, path = entry.partition("=")
        apis[name] = NcclApi(path, rank, world, torch_ranks.share_id)
    results = []
    for collective in args.collectives.split(","):
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            for size in sizes(args):
                numel = size // dtype.itemsize
                if numel % world:
                    continue
                rows = measure(args, collective, dtype, numel, world, rank, comm, symm, apis)
                results.extend(rows)
                if rank == 0:
                    line = ", ".join(f"{r['peer']} {r['us']:.2f}" for r in rows if r["us"] is not None)
                    print(f"{collective} {dtype_name} {size} B: {line}", flush=True)
    for api in apis.values():
        api.close()
    torch_ranks.write_report(args.out, results)
    dist.destroy_process_group()


def measure(args, collective: str, dtype, numel: int, world: int, rank: int, comm, symm, apis) -> list[dict]:
    """Every peer's median microseconds for one call shape, after checking its output against NCCL's."""
    generator = torch.Generator(device="cuda").manual_seed(1000 + rank)
    source = torch.randn(numel, device="cuda", dtype=dtype, generator=generator)
    output_numel = {"allgather": numel * world, "reducescatter": numel // world}.get(collective, numel)
    peers: dict[str, Callable] = {}
    if collective == "allreduce":
        peers["nccl"] = lambda src, out: dist.all_reduce(out)  # in place: `out` holds the input (below)
        peers["loom"] = lambda src, out: comm.all_reduce(src, output=out)
        # In place, as torch's two-shot kernel runs (`out` holds the input, below).
        peers["loom in place"] = lambda src, out: comm.all_reduce(out)
    elif collective == "allgather":
        peers["nccl"] = lambda src, out: dist.all_gather_into_tensor(out, src)
        peers["loom"] = lambda src, out: comm.all_gather(out, src)
    elif collective == "reducescatter":
        peers["nccl"] = lambda src, out: dist.reduce_scatter_tensor(out, src)
        peers["loom"] = lambda src, out: comm.reduce_scatter(out, src)
    elif collective == "reduce":  # to rank 0; NCCL in place on `out`, which holds the input (below)
        peers["nccl"] = lambda src, out: dist.reduce(out, dst=0)
        peers["loom"] = lambda src, out: comm.reduce(src, root=0, output=out)
    else:
        peers["nccl"] = lambda src, out: dist.all_to_all_single(out, src)
        peers["loom"] = lambda src, out: comm.all_to_all(out, src)
    for name, api in apis.items():
        calls = {
            "allreduce": lambda src, out, a=api: a.all_reduce(src, out, current_stream()),
            "allgather": lambda src, out, a=api: a.all_gather(src, out, current_stream()),
            "reducescatter": lambda src, out, a=api: a.reduce_scatter(src, out, current_stream()),
            "alltoall": lambda src, out, a=api: a.all_to_all(src, out, current_stream()),
            "reduce": lambda src, out, a=api: a.reduce(src, out, 0, current_stream()),
        }
        peers[name] = calls[collective]
    symmetric_input = symm.buffer(numel, dtype)
    symmetric = set()
    for name, kernel in symm.kernels(collective).items():
        peers[name] = lambda src, out, k=kernel: k(symmetric_input, out)
        symmetric.add(name)
    in_place = collective in ("allreduce", "reduce")  # NCCL's call runs in place on a copy of the input
    reference = source.clone() if in_place else torch.empty(output_numel, device="cuda", dtype=dtype)
    peers["nccl"](source, reference)
    torch.cuda.synchronize()
    rows = []
    for name, call in peers.items():
        output = source.clone() if in_place else torch.empty(output_numel, device="cuda", dtype=dtype)
        row = {"collective": collective, "dtype": str(dtype).split(".")[-1], "bytes": numel * dtype.itemsize}
        try:
            symmetric_input.copy_(source)  # afresh: the in-place kernel sums into it
            result = call(source, output)
            torch.cuda.synchronize()
            output = result if name in symmetric and result is not None else output
            # Sums in another order: a few units in the last place of the data type.
            tolerance = 2e-2 if dtype.itemsize == 2 else 1e-4
            error = ((output.float() - reference.float()).norm() / reference.float().norm().clamp_min(1e-30)).item()
            if collective == "reduce" and rank != 0:
                error = 0.0  # only the root's output is defined
            if not error <= tolerance:
                rows.append({**row, "peer": name, "us": None, "error": f"relative error {error:.2e} against NCCL"})
                continue
        except Exception as failure:  # a peer torch lacks at this size or dtype: said, not timed
            rows.append({**row, "peer": name, "us": None, "error": f"{type(failure).__name__}: {failure}"})
            continue
        for mode in args.modes.split(","):
            timer = time_graph if mode == "graph" else time_eager
            us = timer(lambda: call(source, output), args.calls_per_graph, args.repeats, dist.barrier)
            rows.append({**row, "peer": name, "mode": mode, "us": us})
    return rows


def current_stream() -> int:
    """The cudaStream_t torch runs on now (the capture stream while a graph is captured)."""
    return torch.cuda.current_stream().cuda_stream


if __name__ == "__main__":
    main()
