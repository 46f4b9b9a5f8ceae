"""Point-to-point and all-to-all-v through the NCCL API, the library beside NCCL in the same processes (issue 39).
One process per GPU, under torchrun:

    torchrun --nproc-per-node 2 bench/p2p_bench.py --out p2p.json [--patterns send,exchange,alltoallv]

Both peers are called through ctypes (bench/nccl_api.py) on the same tensors and streams: ``nccl`` is the
libnccl.so torch ships, ``loom`` is libloom_nccl.so (``loom nccl-path``; it forwards to that same NCCL what it
does not run itself, and LOOM_NCCL_STATS says which); ``loom python`` is loom.Communicator, for the
all-to-all-v (which it runs on Loom's counted plans); ``loom packets`` is the eager packet plan of two ranks
(alltoallv_packet: one crossing, no handshake) run straight through the executor, for send and exchange up
to its 64 KiB capacity (neither the library nor loom.Communicator chooses it yet). Patterns, per size (each
rank's bytes):

- ``send``: a lone ncclSend from each even rank to the next odd one, which posts the ncclRecv (pipeline
  stages handing activations on);
- ``exchange``: a group of one send to and one receive from the partner rank (both directions at once);
- ``alltoallv``: torch's all_to_all_single with uneven splits: a group of a send to and a receive from every
  rank, each rank's counts drawn at random (seeded, the same on every rank) around the even split, zeros
  included, so that the mean is the all-to-all of that size.

Every peer's output is checked against NCCL's first (a peer that disagrees is reported, not timed); then the
median microseconds per call, under CUDA-graph replay (``graph``) and eagerly (``eager``), as JSON rows of
bench/peers.py's form (the pattern in ``collective``), which bench/plot_peers.py draws.
"""

# The timed lambdas run within the loop iteration that defines them (ruff B023 does not see that).
# ruff: noqa: B023

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch_ranks  # beside this file
from loom.runtime.nccl import nccl_library_path
from loom.tools.cuda_timing import time_eager, time_graph
from nccl_api import NCCL_TYPES, NcclApi, torch_nccl  # beside this file
from nccl_bench import sizes  # beside this file: powers of two from --min-bytes to --max-bytes
from uneven_splits import uneven_splits  # beside this file

PATTERNS = ("send", "exchange", "alltoallv")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(NCCL_TYPES))
    parser.add_argument("--modes", default="graph,eager")
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--calls-per-graph", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument("--loom-lib", default="", help="libloom_nccl.so to time (default: loom nccl-path)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    unknown = set(args.patterns.split(",")) - set(PATTERNS)
    if unknown:
        parser.error(f"--patterns: unknown {', '.join(sorted(unknown))}; choose from {', '.join(PATTERNS)}")
    return args


class Pattern:
    """One pattern at one size: this rank's input, an output to fill, and the call of any peer on them."""

    def __init__(self, name: str, numel: int, dtype: torch.dtype, rank: int, world: int, rng: random.Random) -> None:
        self.name, self.rank, self.world = name, rank, world
        self.partner = rank ^ 1 if (rank ^ 1) < world else rank
        generator = torch.Generator(device="cuda").manual_seed(1000 + rank)
        self.source = torch.randn(numel, device="cuda", dtype=dtype, generator=generator)
        self.kind = NCCL_TYPES[str(dtype).split(".")[-1]]
        if name == "alltoallv":
            matrix = uneven_splits(numel, world, rng)  # every rank draws the same matrix
            self.send_counts = matrix[rank]
            self.recv_counts = [matrix[source][rank] for source in range(world)]
            self.output_numel = sum(self.recv_counts)
        else:
            self.output_numel = numel

    def output(self) -> torch.Tensor:
        return torch.zeros(self.output_numel, device="cuda", dtype=self.source.dtype)

    def call(self, api: NcclApi, output: torch.Tensor) -> None:
        if isinstance(api, LoomPackets):
            api.run(self, output)
            return
        stream = torch.cuda.current_stream().cuda_stream  # the capture stream while a graph is captured
        numel = self.source.numel()
        if self.name == "alltoallv":
            api.all_to_all_v(self.source, output, self.send_counts, self.recv_counts, stream)
        elif self.name == "exchange":
            api.group(
                lambda: (
                    api.send(self.source.data_ptr(), numel, self.kind, self.partner, stream),
                    api.recv(output.data_ptr(), numel, self.kind, self.partner, stream),
                )
            )
        elif self.rank % 2 == 0:
            api.send(self.source.data_ptr(), numel, self.kind, self.partner, stream)
        else:
            api.recv(output.data_ptr(), numel, self.kind, self.partner, stream)


class LoomPython:
    """Loom's own API (loom.Communicator) as a peer, for the patterns it runs on Loom plans today:
    all-to-all-v with splits (the JIT's alltoallv_fullmesh), on the current stream."""

    patterns = ("alltoallv",)

    def __init__(self) -> None:
        import loom

        self.communicator = loom.Communicator()

    def all_to_all_v(self, source, output, send_counts, recv_counts, stream) -> None:
        self.communicator.all_to_all(output, source, output_splits=recv_counts, input_splits=send_counts)

    def close(self) -> None:
        self.communicator.abort()


class LoomPackets:
    """The eager packet plan of a pair (alltoallv_packet for two ranks, 64 KiB per entry) through the executor:
    each pair of ranks (0-1, 2-3, ...) is a split of its own, and a send is a counted call whose one entry is
    the message (the receiver's entry back is empty), an exchange one with an entry each way."""

    patterns = ("send", "exchange")
    capacity = 1 << 16

    def __init__(self) -> None:
        import loom
        from loom.compiler.driver import compile_algorithm

        self.world = loom.Communicator()
        self.pair = self.world.split(self.world.rank // 2)
        self.plan = loom.Plan.parse(compile_algorithm("alltoallv_packet", 2, max_message_size=self.capacity))

    def fits(self, pattern: Pattern) -> bool:
        return self.pair.world_size == 2 and pattern.source.numel() * pattern.source.element_size() <= self.capacity

    def run(self, pattern: Pattern, output: torch.Tensor) -> None:
        nbytes = pattern.source.numel() * pattern.source.element_size()
        peer = 1 - self.pair.rank
        sends, receives = [(0, 0), (0, 0)], [(0, 0), (0, 0)]
        if pattern.name == "exchange" or pattern.rank % 2 == 0:
            sends[peer] = (0, nbytes)
        if pattern.name == "exchange" or pattern.rank % 2 == 1:
            receives[peer] = (0, nbytes)
        self.pair.executor.execute_counted(self.plan, pattern.source, output, sends=sends, receives=receives)

    def close(self) -> None:
        self.pair.abort()
        self.world.abort()


def measure(args: argparse.Namespace, pattern: Pattern, apis: dict[str, NcclApi]) -> list[dict]:
    reference = pattern.output()
    pattern.call(apis["nccl"], reference)
    torch.cuda.synchronize()
    rows = []
    for name, api in apis.items():
        if pattern.name not in getattr(api, "patterns", PATTERNS) or not getattr(api, "fits", bool)(pattern):
            continue
        # As bench/peers.py writes its rows, so that bench/plot_peers.py draws these too (a panel per pattern).
        row = {
            "collective": pattern.name,
            "dtype": str(pattern.source.dtype).split(".")[-1],
            "bytes": pattern.source.numel() * pattern.source.element_size(),
            "peer": name,
        }
        output = pattern.output()
        try:
            pattern.call(api, output)
            torch.cuda.synchronize()
        except RuntimeError as failure:
            rows.append({**row, "us": None, "error": str(failure)})
            continue
        if not torch.equal(output, reference):  # moved, not computed: bit for bit
            rows.append({**row, "us": None, "error": "output differs from NCCL's"})
            continue
        for mode in args.modes.split(","):
            timer: Callable = time_graph if mode == "graph" else time_eager
            us = timer(lambda: pattern.call(api, output), args.calls_per_graph, args.repeats, dist.barrier)
            rows.append({**row, "mode": mode, "us": us})
    return rows


def main() -> None:
    args = arguments()
    world, rank = torch_ranks.start()
    os.environ.setdefault("LOOM_NCCL_LIBRARY", torch_nccl())  # what the library forwards to: the same NCCL
    loom_lib = args.loom_lib or str(nccl_library_path())
    apis = {
        "nccl": NcclApi(torch_nccl(), rank, world, torch_ranks.share_id),
        "loom": NcclApi(loom_lib, rank, world, torch_ranks.share_id),
        "loom python": LoomPython(),
        "loom packets": LoomPackets(),
    }
    dtype = getattr(torch, args.dtype)
    rng = random.Random(args.seed)
    results = []
    for name in args.patterns.split(","):
        for size in sizes(args):
            pattern = Pattern(name, size // dtype.itemsize, dtype, rank, world, rng)
            rows = measure(args, pattern, apis)
            results.extend(rows)
            if rank == 0:
                line = ", ".join(f"{r['peer']} {r.get('mode', '-')} {r['us'] or r.get('error')}" for r in rows)
                print(f"{name} {size} B: {line}", flush=True)
    for api in apis.values():
        api.close()
    torch_ranks.write_report(args.out, results, dtype=args.dtype)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
