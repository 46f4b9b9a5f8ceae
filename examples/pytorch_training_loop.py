"""Data-parallel training with Loom doing the gradient all-reduce, eagerly or replayed in a CUDA graph.

Every rank holds the same model, trains on its own batch, and averages gradients with Loom: the
gradients are flattened into one bucket, ``comm.all_reduce(bucket)`` sums it in place on the current
stream (the selector picks a plan for the bucket's size), and the mean goes back into ``.grad``.
With ``--graph`` the all-reduce of the (static) bucket is captured once into a CUDA graph and
replayed every step, the way graph-captured training steps call collectives.

    python -m loom.launch -n 2 examples/pytorch_training_loop.py [--graph] [--steps 50]

At the end every rank checks that all ranks hold the same parameters.
"""

from __future__ import annotations

import argparse
import os

import loom
import torch


def flat_gradients(model: torch.nn.Module, bucket: torch.Tensor) -> None:
    offset = 0
    for parameter in model.parameters():
        count = parameter.numel()
        bucket[offset : offset + count].copy_(parameter.grad.view(-1))
        offset += count


def set_gradients(model: torch.nn.Module, bucket: torch.Tensor) -> None:
    offset = 0
    for parameter in model.parameters():
        count = parameter.numel()
        parameter.grad.copy_(bucket[offset : offset + count].view_as(parameter))
        offset += count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", action="store_true", help="replay the all-reduce from a captured CUDA graph")
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))  # as with NCCL: one GPU per rank
    comm = loom.Communicator()
    rank, world = comm.rank, comm.world_size

    torch.manual_seed(0)  # the same initial model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    bucket = torch.zeros(sum(p.numel() for p in model.parameters()), device="cuda")
    data = torch.Generator(device="cuda").manual_seed(1000 + rank)  # each rank its own batches

    graph = None
    if args.graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            comm.all_reduce(bucket)  # a first call outside capture sets up the plan's context
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            comm.all_reduce(bucket)

    for step in range(args.steps):
        inputs = torch.randn(64, 256, device="cuda", generator=data)
        targets = torch.randint(0, 10, (64,), device="cuda", generator=data)
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        flat_gradients(model, bucket)
        if graph is not None:
            graph.replay()
        else:
            comm.all_reduce(bucket)
        bucket /= world
        set_gradients(model, bucket)
        optimizer.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}  ({bucket.numel() * 4 / 2**20:.1f} MiB of gradients)")

    parameters = torch.cat([p.detach().view(-1) for p in model.parameters()])
    everyone = torch.empty(parameters.numel() * world, device="cuda")
    comm.all_gather(everyone, parameters)
    spread = (everyone.view(world, -1) - parameters).abs().max().item()
    print(f"rank {rank}: parameters differ from the other ranks' by at most {spread:.2e}")
    return 0 if spread <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
