"""All-to-all-v through loom.Communicator on GPUs with torch tensors (issue 39), against the reference the
seeded splits and inputs give (a copy: bit for bit): split lists read on the host; split tensors on the
device; and a CUDA graph captured once with device splits, replayed with new splits and new data each
time (the kernel reads the entries the graph computes from the split tensors then). One process per GPU,
or N ranks as threads sharing GPU 0:

    python -m loom.launch -n 2 tests/executor/gpu/alltoallv_check.py
    python tests/executor/gpu/alltoallv_check.py --share-gpu 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import loom
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ranks  # noqa: E402
from alltoallv_cases import COLUMNS, expected_output, random_counts, rank_input  # noqa: E402

MOST_ROWS = 30000  # per pair: up to 360 KB of float32 rows per peer
CAPACITY = MOST_ROWS * 8  # rows each buffer holds: every rank's largest total, for any world up to 8


def check_rank(bootstrap, sharing: bool) -> int:
    comm = loom.Communicator(bootstrap)
    try:
        return check_calls(comm)
    except Exception:
        print(f"[rank {comm.rank}] device report: {comm.native.device_timeout_report()}", flush=True)
        raise


def _compare(got: torch.Tensor, seed: int, rank: int, counts: np.ndarray, what: str) -> int:
    expected = expected_output(seed, rank, counts)
    rows = len(expected)
    same = np.array_equal(got[:rows].cpu().numpy(), expected)
    if not same:
        print(f"[rank {rank}] FAIL {what}, seed {seed}: output differs from the reference", flush=True)
    return 0 if same else 1


def check_calls(comm: loom.Communicator) -> int:
    world, rank = comm.world_size, comm.rank
    device = torch.device("cuda", torch.cuda.current_device())
    failures = 0
    source = torch.zeros((CAPACITY, COLUMNS), dtype=torch.float32, device=device)
    output = torch.zeros((CAPACITY, COLUMNS), dtype=torch.float32, device=device)
    send_splits = torch.zeros(world, dtype=torch.int64, device=device)
    receive_splits = torch.zeros(world, dtype=torch.int64, device=device)

    def load(seed: int) -> np.ndarray:
        counts = random_counts(seed, world, MOST_ROWS)
        mine = torch.from_numpy(rank_input(seed, rank, counts))
        source[: len(mine)].copy_(mine)
        output.fill_(-1)
        return counts

    # Split lists, read on the host; the first call of a shape sets up its plan (the JIT) and context.
    for seed in range(3):
        counts = load(seed)
        comm.all_to_all(output, source, output_splits=counts[:, rank].tolist(), input_splits=counts[rank].tolist())
        ranks.synchronize()
        failures += _compare(output, seed, rank, counts, "host splits")
    # Split tensors: the entries are computed and read on the device.
    for seed in range(3, 6):
        counts = load(seed)
        send_splits.copy_(torch.from_numpy(counts[rank]))
        receive_splits.copy_(torch.from_numpy(counts[:, rank].copy()))
        comm.all_to_all(output, source, output_splits=receive_splits, input_splits=send_splits)
        ranks.synchronize()
        failures += _compare(output, seed, rank, counts, "device splits")
    # One capture, replayed with new splits and new data.
    graph = torch.cuda.CUDAGraph()
    with ranks.capture(graph):
        comm.all_to_all(output, source, output_splits=receive_splits, input_splits=send_splits)
    for seed in range(6, 10):
        counts = load(seed)
        send_splits.copy_(torch.from_numpy(counts[rank]))
        receive_splits.copy_(torch.from_numpy(counts[:, rank].copy()))
        graph.replay()
        ranks.synchronize()
        failures += _compare(output, seed, rank, counts, "graph replay with new splits")
    stats = comm.executor.stats()
    if stats["contexts_built"] != 1:  # one allocation set: every size and both table kinds share a context
        print(f"[rank {rank}] FAIL contexts built: {stats['contexts_built']}, expected 1", flush=True)
        failures += 1
    print(f"[rank {rank}] all-to-all-v: {10 - failures} of 10 calls right", flush=True)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ranks.add_arguments(parser)
    args = parser.parse_args()
    return ranks.run(args, lambda bootstrap: check_rank(bootstrap, bool(args.share_gpu)))


if __name__ == "__main__":
    sys.exit(main())
