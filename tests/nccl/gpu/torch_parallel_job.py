"""An unchanged torch parallel training job of the kinds real jobs make, for tests/nccl/test_nccl_parallel_gpu.py:
the default group bound to the device (so torch makes every subgroup with ncclCommSplit), a 2-D DeviceMesh of
shape MESH ("replicate" x "shard"), FSDP2 with HSDP over it, tensor-parallel-style collectives on the "shard"
dimension's group, and DDP over the "replicate" dimension's group. Everything is seeded alike on every run,
so a run under LD_PRELOAD=libloom_nccl.so and one on plain NCCL must give the same numbers; each rank writes
them as JSON to RESULTS/rank<R>.json. It knows nothing of Loom.

    torchrun --nproc-per-node=2 torch_parallel_job.py MESH RESULTS     (MESH: "1x2" or "2x1")
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

STEPS = 4


def model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 64)).cuda()


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(1000 * step + rank)
    data = torch.randn(32, 256, device="cuda", generator=generator)
    return data, torch.randn(32, 64, device="cuda", generator=generator)


def train(net: nn.Module, rank: int) -> list[float]:
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    losses = []
    for step in range(STEPS):
        data, target = batch(rank, step)
        loss = nn.functional.mse_loss(net(data), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def checksum(tensor: torch.Tensor) -> list[float]:
    """Sum and sum of squares in float64: equal runs give equal numbers, a wrong element moves them."""
    values = tensor.detach().double()
    return [float(values.sum()), float((values * values).sum())]


def tensor_parallel(group: dist.ProcessGroup, rank: int) -> dict[str, list[float]]:
    """The collectives a tensor-parallel layer makes on its group, on fresh random data of several sizes."""
    out = {}
    size = dist.get_world_size(group)
    for elements in (1024, 65536, 1 << 20):
        generator = torch.Generator(device="cuda").manual_seed(elements + rank)
        shard = torch.randn(elements, device="cuda", generator=generator, dtype=torch.bfloat16)
        reduced = shard.clone()
        dist.all_reduce(reduced, group=group)
        gathered = torch.empty(elements * size, device="cuda", dtype=torch.bfloat16)
        dist.all_gather_into_tensor(gathered, shard, group=group)
        scattered = torch.empty(elements // size, device="cuda", dtype=torch.bfloat16)
        dist.reduce_scatter_tensor(scattered, shard, group=group)
        out[f"all_reduce {elements}"] = checksum(reduced)
        out[f"all_gather {elements}"] = checksum(gathered)
        out[f"reduce_scatter {elements}"] = checksum(scattered)
    return out


def main() -> None:
    mesh_shape = tuple(int(n) for n in sys.argv[1].split("x"))
    results_dir = Path(sys.argv[2])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank = dist.get_rank()
    mesh = init_device_mesh("cuda", mesh_shape, mesh_dim_names=("replicate", "shard"))
    results: dict[str, object] = {"mesh": list(mesh_shape)}

    hsdp = model(seed=1)
    for layer in hsdp:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(hsdp, mesh=mesh)
    results["hsdp losses"] = train(hsdp, rank)
    results["hsdp params"] = [checksum(p.full_tensor()) for p in hsdp.parameters()]

    results["tensor parallel"] = tensor_parallel(mesh.get_group("shard"), rank)

    ddp = DistributedDataParallel(model(seed=2), device_ids=[local_rank], process_group=mesh.get_group("replicate"))
    results["ddp losses"] = train(ddp, mesh.get_local_rank("replicate"))
    results["ddp params"] = [checksum(p) for p in ddp.parameters()]

    torch.cuda.synchronize()
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"rank{rank}.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()
    print(f"OK {rank}", flush=True)


if __name__ == "__main__":
    main()
