"""loom.Communicator with nothing registered by hand, N ranks sharing GPU 0: every collective at every size
up to 64 MiB per rank runs the plan the selector picks among those whose thread blocks fit the placement
(bundled plans tuned on GPUs of their own are passed over; the JIT compiles fewer instances where none
fits) and matches a float64 reference on fresh random data (issue 55).

    python tests/executor/gpu/bundled_selection_check.py --share-gpu 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import loom
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ranks  # noqa: E402

SIZES = (1 << 10, 16 << 10, 256 << 10, 4 << 20, 64 << 20)  # bytes per rank
TOLERANCE = 1e-4


def check_rank(bootstrap, sizes: list[int]) -> int:
    comm = loom.Communicator(bootstrap)
    world, rank = comm.world_size, comm.rank
    failures = 0
    chosen: dict[str, set[str]] = {}

    def check(what: str, nbytes: int, got: torch.Tensor, expected: torch.Tensor, collective: str, inplace: bool):
        nonlocal failures
        error = (got.double() - expected).abs().max().item()
        root = 0 if collective == "broadcast" else None
        placement = comm.executor.placement
        plan = loom.registry.select(
            collective, nbytes, "float32", world, world, inplace=inplace, root=root, placement=placement
        )
        chosen.setdefault(what, set()).add(plan.name if plan is not None else "<none>")
        if error > TOLERANCE:
            failures += 1
            print(f"[rank {rank}] FAIL {what} of {nbytes} bytes: max error {error}", flush=True)

    for nbytes in sizes:
        count = nbytes // 4 // world * world  # whole pieces for reduce-scatter and all-to-all
        piece = count // world
        # Every rank makes every rank's input from the same seeds, on the GPU (64 MiB of 8 ranks is 2^27 numbers).
        generator = torch.Generator(device="cuda").manual_seed(nbytes)
        data = [torch.randn(count, generator=generator, device="cuda") for _ in range(world)]
        total = sum(x.double() for x in data)
        mine = data[rank]
        for inplace in (False, True):
            tensor = mine.clone()
            if inplace:
                comm.all_reduce(tensor)
                result = tensor
            else:
                result = torch.empty_like(tensor)
                comm.all_reduce(tensor, output=result)
            ranks.synchronize()
            check(f"all_reduce{' in place' if inplace else ''}", count * 4, result, total, "allreduce", inplace)
        out = torch.empty(count * world, device="cuda")
        comm.all_gather(out, mine)
        ranks.synchronize()
        check("all_gather", count * 4, out, torch.cat(data).double(), "allgather", False)
        out = torch.empty(piece, device="cuda")
        comm.reduce_scatter(out, mine)
        ranks.synchronize()
        check("reduce_scatter", count * 4, out, total[rank * piece : (rank + 1) * piece], "reducescatter", False)
        out = torch.empty(count, device="cuda")
        comm.all_to_all(out, mine)
        ranks.synchronize()
        expected = torch.cat([x[rank * piece : (rank + 1) * piece] for x in data]).double()
        check("all_to_all", count * 4, out, expected, "alltoall", False)
        tensor = mine.clone()
        comm.broadcast(tensor, root=0)
        ranks.synchronize()
        check("broadcast", count * 4, tensor, data[0].double(), "broadcast", True)
        print(f"[rank {rank}] {nbytes} bytes done", flush=True)
    if rank == 0:
        for what, names in chosen.items():
            print(f"plans for {what}: {', '.join(sorted(names))}", flush=True)
    print(f"[rank {rank}] bundled selection at {world} ranks sharing the GPU: {failures} failures", flush=True)
    return failures


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    ranks.add_arguments(parser)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="bytes per rank, comma-separated")
    arguments = parser.parse_args()
    sizes = [int(size) for size in arguments.sizes.split(",")]
    sys.exit(ranks.run(arguments, lambda bootstrap: check_rank(bootstrap, sizes)))
