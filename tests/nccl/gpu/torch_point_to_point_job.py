"""An unchanged torch job of two ranks whose traffic is point-to-point, for tests/nccl/test_nccl_point_to_point_gpu.py
(issue 39): a pipeline of two stages (activations forward and their gradients back with send/recv), an MoE layer
whose all_to_all_single splits change every step (dispatch and combine), batch_isend_irecv of several tensors of
different types, and gather and scatter. Everything is seeded alike on every run, so a run under
LD_PRELOAD=libloom_nccl.so and one on plain NCCL must give the very same numbers (only copies: bit for bit);
each rank writes them as JSON to RESULTS/rank<R>.json. It knows nothing of Loom.

    torchrun --nproc-per-node=2 torch_point_to_point_job.py RESULTS
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

STEPS = 4


def checksum(tensor: torch.Tensor) -> list[float]:
    """Sum and sum of squares in float64: equal runs give equal numbers, a wrong element moves them."""
    values = tensor.detach().double()
    return [float(values.sum()), float((values * values).sum())]


def pipeline(rank: int) -> dict[str, list[float]]:
    """Stage 0 on rank 0, stage 1 on rank 1: activations go forward, their gradients come back."""
    torch.manual_seed(7)
    stages = [nn.Sequential(nn.Linear(256, 512), nn.GELU()), nn.Linear(512, 64)]
    stage = stages[rank].cuda()
    optimizer = torch.optim.SGD(stage.parameters(), lr=0.05)
    losses = []
    for step in range(STEPS):
        generator = torch.Generator(device="cuda").manual_seed(100 + step)
        data = torch.randn(32, 256, device="cuda", generator=generator)
        target = torch.randn(32, 64, device="cuda", generator=generator)
        if rank == 0:
            activations = stage(data)
            dist.send(activations.detach(), 1)
            gradient = torch.empty_like(activations)
            dist.recv(gradient, 1)
            activations.backward(gradient)
        else:
            received = torch.empty(32, 512, device="cuda")
            dist.recv(received, 0)
            received.requires_grad_(True)
            loss = nn.functional.mse_loss(stage(received), target)
            loss.backward()
            dist.send(received.grad, 0)
            losses.append(float(loss.detach()))
        optimizer.step()
        optimizer.zero_grad()
    out = {"losses": losses}
    for name, parameter in stage.named_parameters():
        out[f"stage{rank}.{name}"] = checksum(parameter)
    return out


def mixture_of_experts(rank: int, world: int) -> dict[str, list[float]]:
    """Tokens routed to the rank of their expert and back: all_to_all_single with new splits every step."""
    rng = random.Random(39)  # every rank draws the same routing
    out = {}
    for step in range(STEPS):
        counts = [[rng.choice([0, rng.randrange(1, 300)]) for _ in range(world)] for _ in range(world)]
        send_splits = counts[rank]
        recv_splits = [counts[source][rank] for source in range(world)]
        generator = torch.Generator(device="cuda").manual_seed(1000 * step + rank)
        tokens = torch.randn(sum(send_splits), 128, device="cuda", dtype=torch.bfloat16, generator=generator)
        dispatched = torch.empty(sum(recv_splits), 128, device="cuda", dtype=torch.bfloat16)
        dist.all_to_all_single(dispatched, tokens, recv_splits, send_splits)
        expert_out = dispatched * (rank + 2)  # this rank's expert
        combined = torch.empty_like(tokens)
        dist.all_to_all_single(combined, expert_out, send_splits, recv_splits)
        out[f"dispatched{step}"] = checksum(dispatched)
        out[f"combined{step}"] = checksum(combined)
    return out


def batched_exchange(rank: int) -> dict[str, list[float]]:
    """batch_isend_irecv of three tensors of different types and sizes to the other rank, and back."""
    peer = 1 - rank
    shapes = [(1000, torch.float32), (4097, torch.bfloat16), (33, torch.int64)]
    outgoing = [(torch.arange(n, device="cuda") * (rank + 1) % 251).to(dtype) for n, dtype in shapes]
    incoming = [torch.empty(n, device="cuda", dtype=dtype) for n, dtype in shapes]
    operations = [dist.P2POp(dist.isend, tensor, peer) for tensor in outgoing]
    operations += [dist.P2POp(dist.irecv, tensor, peer) for tensor in incoming]
    for request in dist.batch_isend_irecv(operations):
        request.wait()
    return {f"incoming{index}": checksum(tensor) for index, tensor in enumerate(incoming)}


def gather_and_scatter(rank: int, world: int) -> dict[str, list[float]]:
    mine = torch.full((777,), float(rank + 1), device="cuda")
    gathered = [torch.empty_like(mine) for _ in range(world)] if rank == 0 else None
    dist.gather(mine, gathered, dst=0)
    pieces = None
    if rank == 1:
        pieces = [torch.full((555,), float(10 * (index + 1)), device="cuda") for index in range(world)]
    scattered = torch.empty(555, device="cuda")
    dist.scatter(scattered, pieces, src=1)
    out = {"scattered": checksum(scattered)}
    if rank == 0:
        out["gathered"] = checksum(torch.cat(gathered))
    return out


def main() -> None:
    results = Path(sys.argv[1])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    out = {}
    out |= pipeline(rank)
    out |= mixture_of_experts(rank, world)
    out |= batched_exchange(rank)
    out |= gather_and_scatter(rank, world)
    torch.cuda.synchronize()
    results.mkdir(parents=True, exist_ok=True)
    (results / f"rank{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()
    print(f"OK {rank}", flush=True)


if __name__ == "__main__":
    main()
