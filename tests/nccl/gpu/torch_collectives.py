"""An unchanged torch.distributed program: every collective of the NCCL backend, eagerly and replayed
from a torch.cuda.graph, with values checked on every rank. tests/nccl/test_nccl_gpu.py starts it
with torchrun and LD_PRELOAD=libloom_nccl.so; it knows nothing of Loom. Prints "OK <rank>" at the end."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def expect(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        raise AssertionError(f"{name}: {bad.numel()} elements differ, first at {bad[0].tolist()}: {got.flatten()[:4]}")


def run_all(rank: int, world: int, elements: int, step: int, tensors: dict[str, torch.Tensor]) -> None:
    """Every collective once; inputs depend on rank and `step` so that graph replays are checked too."""
    t = tensors
    base = torch.arange(elements, device="cuda", dtype=torch.float32) % 13 + 1
    t["ar"].copy_(base * (rank + 1 + step))
    t["ar_max"].copy_(base * (rank + 1 + step))
    t["ag_in"].copy_(base * (rank + step))
    t["rs_in"].copy_(torch.arange(elements * world, device="cuda", dtype=torch.float32) % 7 + rank + step)
    t["bc"].copy_(base * (step + 3) if rank == 0 else torch.zeros_like(base))
    t["a2a_in"].copy_(torch.full((elements * world,), float(rank + step), device="cuda"))
    t["i64"].copy_(torch.arange(elements, device="cuda", dtype=torch.int64) * (rank + 1))
    for root in (0, world - 1):  # the bundled root and one the JIT compiles (the same one with 1 rank)
        t[f"red{root}"].copy_(base * (rank + 2 + step))
    dist.all_reduce(t["ar"])
    dist.all_reduce(t["ar_max"], op=dist.ReduceOp.MAX)
    dist.all_reduce(t["i64"])
    dist.all_gather_into_tensor(t["ag_out"], t["ag_in"])
    dist.reduce_scatter_tensor(t["rs_out"], t["rs_in"])
    dist.broadcast(t["bc"], src=0)
    for root in (0, world - 1):
        dist.reduce(t[f"red{root}"], dst=root)
    dist.all_to_all_single(t["a2a_out"], t["a2a_in"])


def check_all(rank: int, world: int, elements: int, step: int, tensors: dict[str, torch.Tensor]) -> None:
    t = tensors
    base = torch.arange(elements, device="cuda", dtype=torch.float32) % 13 + 1
    ranks_sum = sum(r + 1 + step for r in range(world))
    expect("all_reduce sum", t["ar"], base * ranks_sum)
    expect("all_reduce max", t["ar_max"], base * (world + step))
    expect(
        "all_reduce int64",
        t["i64"],
        torch.arange(elements, device="cuda", dtype=torch.int64) * sum(range(1, world + 1)),
    )
    expect("all_gather", t["ag_out"], torch.cat([base * (r + step) for r in range(world)]))
    full = sum(torch.arange(elements * world, device="cuda", dtype=torch.float32) % 7 + r + step for r in range(world))
    expect("reduce_scatter", t["rs_out"], full[rank * elements : (rank + 1) * elements])
    expect("broadcast", t["bc"], base * (step + 3))
    for root in (0, world - 1):
        if rank == root:  # torch leaves the other ranks' tensors unspecified
            expect(f"reduce to root {root}", t[f"red{root}"], base * sum(r + 2 + step for r in range(world)))
    expect(
        "all_to_all",
        t["a2a_out"],
        torch.cat([torch.full((elements,), float(r + step), device="cuda") for r in range(world)]),
    )


def main() -> None:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    for elements in (1, 1000, 1 << 16, 1 << 22):
        f32 = dict(device="cuda", dtype=torch.float32)
        tensors = {
            "ar": torch.empty(elements, **f32),
            "ar_max": torch.empty(elements, **f32),
            "i64": torch.empty(elements, device="cuda", dtype=torch.int64),
            "ag_in": torch.empty(elements, **f32),
            "ag_out": torch.empty(elements * world, **f32),
            "rs_in": torch.empty(elements * world, **f32),
            "rs_out": torch.empty(elements, **f32),
            "bc": torch.empty(elements, **f32),
            "red0": torch.empty(elements, **f32),
            f"red{world - 1}": torch.empty(elements, **f32),
            "a2a_in": torch.empty(elements * world, **f32),
            "a2a_out": torch.empty(elements * world, **f32),
        }
        run_all(rank, world, elements, 0, tensors)  # eager (and the setup a capture needs)
        torch.cuda.synchronize()
        check_all(rank, world, elements, 0, tensors)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run_all(rank, world, elements, 1, tensors)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # the inputs' copies are captured too: each replay starts afresh
            run_all(rank, world, elements, 2, tensors)
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            check_all(rank, world, elements, 2, tensors)
        del graph
        dist.barrier()
    dist.destroy_process_group()
    print(f"OK {rank}", flush=True)


if __name__ == "__main__":
    main()
