"""All-to-all-v through loom.Communicator on GPUs with torch tensors (issue 39), against the reference the
seeded splits and inputs give (a copy: bit for bit): split lists read on the host; split tensors on the
device; and a CUDA graph captured once with device splits, replayed with new splits and new data each
time (the kernel reads the entries the graph computes from the split tensors then); bf16 entries of
one element per row, which start and end at 2-byte offsets (the device copy's misaligned paths;
``--offsets-only`` runs just these, for compute-sanitizer); and the eager packet plan, alltoallv_packet
(``--packets-only``), eagerly and in a graph replayed with new device-side entries. One process per GPU,
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


def check_rank(bootstrap, offsets_only: bool, packets_only: bool = False, graphs: bool = True) -> int:
    comm = loom.Communicator(bootstrap)
    try:
        if offsets_only:
            return check_two_byte_offsets(comm)
        if packets_only:
            return check_packets(comm, graphs)
        return check_calls(comm) + check_two_byte_offsets(comm) + check_packets(comm)
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


def _flat_bf16(seed: int, sender: int, counts: np.ndarray) -> torch.Tensor:
    """The seeded rows' first column as bf16: one 2-byte element per row."""
    return torch.from_numpy(rank_input(seed, sender, counts)[:, 0].copy()).to(torch.bfloat16)


def check_two_byte_offsets(comm: loom.Communicator) -> int:
    """All-to-all-v of 1-D bf16 tensors: with odd counts, entries start and end at any 2-byte offset, the
    case a byte-wise device copy once made many times slower (docs/perf/p2p.md). The bytes past the output's
    entries must stay untouched."""
    world, rank = comm.world_size, comm.rank
    failures = 0
    seeds = range(10, 13)
    every_counts = {seed: random_counts(seed, world, MOST_ROWS) for seed in seeds}
    for counts in every_counts.values():
        counts[counts > 0] |= 1  # odd counts: every entry after an odd one is off 4-byte alignment
    # Allocated once, before the first call: with ranks sharing a GPU, an allocation while the peers' kernels
    # wait for this rank can be ordered behind them (docs/testing.md, known limits).
    most_sent = max(int(counts[rank].sum()) for counts in every_counts.values())
    most_received = max(int(counts[:, rank].sum()) for counts in every_counts.values())
    source = torch.zeros(most_sent, dtype=torch.bfloat16, device="cuda")
    output = torch.zeros(most_received + 9, dtype=torch.bfloat16, device="cuda")
    for seed, counts in every_counts.items():
        sent, received = int(counts[rank].sum()), int(counts[:, rank].sum())
        source[:sent].copy_(_flat_bf16(seed, rank, counts))
        output.fill_(-1)
        receive, send = counts[:, rank].tolist(), counts[rank].tolist()
        comm.all_to_all(output[:received], source[:sent], output_splits=receive, input_splits=send)
        ranks.synchronize()
        pieces = []
        for sender in range(world):
            start = int(counts[sender, :rank].sum())
            pieces.append(_flat_bf16(seed, sender, counts)[start : start + int(counts[sender, rank])])
        expected = torch.cat(pieces)
        got = output.cpu()
        if not (torch.equal(got[:received], expected) and bool((got[received:] == -1).all())):
            print(f"[rank {rank}] FAIL bf16 entries at 2-byte offsets, seed {seed}", flush=True)
            failures += 1
    print(f"[rank {rank}] all-to-all-v at 2-byte offsets: {3 - failures} of 3 calls right", flush=True)
    return failures


PACKET_ROWS = 2000  # per pair: 24 000 bytes of float32 rows, inside the packet plan's 64 KiB per entry


def _entries(counts: np.ndarray) -> list[tuple[int, int]]:
    row = COLUMNS * 4
    return [(int(start) * row, int(n) * row) for start, n in zip(np.cumsum(counts) - counts, counts, strict=True)]


def check_packets(comm: loom.Communicator, graphs: bool = True) -> int:
    """The eager packet plan (alltoallv_packet: no handshake, a count packet ahead of each entry's packets):
    eager calls with host entries, then (``graphs``) a CUDA graph whose table lives on the device, replayed
    with new entries and data each time. More calls than the two halves of the packet regions."""
    from loom.compiler.driver import compile_algorithm

    world, rank = comm.world_size, comm.rank
    plan = loom.Plan.parse(compile_algorithm("alltoallv_packet", world))
    failures = 0
    source = torch.zeros((PACKET_ROWS * world, COLUMNS), dtype=torch.float32, device="cuda")
    output = torch.zeros((PACKET_ROWS * world, COLUMNS), dtype=torch.float32, device="cuda")
    table = torch.zeros((2 * world, 2), dtype=torch.int64, device="cuda")

    def load(seed: int) -> np.ndarray:
        counts = random_counts(seed, world, PACKET_ROWS)
        mine = rank_input(seed, rank, counts)
        source[: len(mine)].copy_(torch.from_numpy(mine))
        output.fill_(-7.0)
        return counts

    for seed in range(60, 64):
        counts = load(seed)
        comm.executor.execute_counted(
            plan, source, output, sends=_entries(counts[rank]), receives=_entries(counts[:, rank])
        )
        ranks.synchronize()
        failures += _compare(output, seed, rank, counts, "packet all-to-all-v")
    if not graphs:
        print(f"[rank {rank}] packet all-to-all-v: {4 - failures} of 4 calls right", flush=True)
        return failures
    graph = torch.cuda.CUDAGraph()
    with ranks.capture(graph):
        comm.executor.execute_counted(plan, source, output, entries=table)
    for seed in range(70, 73):
        counts = load(seed)
        table.copy_(torch.tensor(_entries(counts[rank]) + _entries(counts[:, rank]), dtype=torch.int64))
        graph.replay()
        ranks.synchronize()
        failures += _compare(output, seed, rank, counts, "packet all-to-all-v, graph replay")
    print(f"[rank {rank}] packet all-to-all-v: {7 - failures} of 7 calls right", flush=True)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ranks.add_arguments(parser)
    parser.add_argument("--offsets-only", action="store_true", help="only the bf16 calls at 2-byte offsets")
    parser.add_argument("--packets-only", action="store_true", help="only the eager packet plan's calls")
    parser.add_argument(
        "--no-graphs",
        action="store_true",
        help="no CUDA graph replays (under compute-sanitizer a replay of ranks sharing a GPU waited for its peer "
        "until the device timeout, apparently not run side by side with the peer's)",
    )
    args = parser.parse_args()
    return ranks.run(
        args, lambda bootstrap: check_rank(bootstrap, args.offsets_only, args.packets_only, not args.no_graphs)
    )


if __name__ == "__main__":
    sys.exit(main())
