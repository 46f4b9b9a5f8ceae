"""A send/recv ring through pair communicators on GPUs, each rank's two pairs one launch per call
(Executor.execute_counted_group, issue 39: how the NCCL library runs a group with several peers under
LOOM_P2P_ONE_LAUNCH=1), against the values sent, bit for bit. The ranks drift apart on purpose: before some
calls a rank sleeps a random while, as nccl-tests' threads do while they prepare their check data, so a
rank's kernel often waits long for a peer that has not launched yet. ``--separate`` makes each pair's call
a launch of its own, on a stream of its own (the library's default), to compare. One process per GPU, or N
ranks as threads sharing GPU 0:

    python tests/executor/gpu/counted_group_check.py --share-gpu 8 --plan packet
    python -m loom.launch -n 4 tests/executor/gpu/counted_group_check.py --plan pair
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import loom
import torch
from loom import _native
from loom.compiler.driver import compile_algorithm

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ranks  # noqa: E402
from pair_communicators import pair_communicators  # noqa: E402

SIZES = [4, 100, 1024, 4099, 16384]  # float32 elements: 16 B to 64 KiB, odd ones too


def pair_plan(kind: str):
    if kind == "packet":
        text = compile_algorithm("alltoallv_packet", 2, max_message_size=65536)
    else:
        text = compile_algorithm("alltoallv_fullmesh", 2, instances=1)
    return _native.Plan.parse(text)


def check_rank(bootstrap, kind: str, calls: int, separate: bool) -> int:
    comm = loom.Communicator(bootstrap)
    world, rank = comm.world_size, comm.rank
    plan = pair_plan(kind)
    mine = pair_communicators(comm)
    to, frm = (rank + 1) % world, (rank - 1) % world
    used = sorted(pair for pair in mine if (to in pair or frm in pair))
    device = torch.device("cuda", torch.cuda.current_device())
    stream = torch.cuda.current_stream()
    side = {pair: torch.cuda.Stream() for pair in used}
    empty = torch.zeros(0, dtype=torch.float32, device=device)
    jitter = random.Random(rank)
    failures = 0
    for call in range(calls):
        count = SIZES[call % len(SIZES)]
        source = torch.arange(count, dtype=torch.float32, device=device) + 1000 * rank + call
        target = torch.full((count,), -1.0, dtype=torch.float32, device=device)
        ranks.synchronize()
        if call % 5 == 4:
            time.sleep(jitter.random() * 0.02)  # drift apart, as a rank preparing its check data does
        group = []
        for pair in used:
            split = mine[pair]
            peer = 1 - split.rank
            sends, receives = [(0, 0), (0, 0)], [(0, 0), (0, 0)]
            send, receive = empty, empty
            if to in pair and to != rank:
                sends[peer], send = (0, source.nbytes), source
            if frm in pair and frm != rank:
                receives[peer], receive = (0, target.nbytes), target
            native = split.executor._native
            group.append(
                (native, plan, send.data_ptr(), send.nbytes, receive.data_ptr(), receive.nbytes, sends, receives)
            )
        if separate:
            for pair, (native, _, *rest) in zip(used, group, strict=True):
                side[pair].wait_stream(stream)
                native.execute_counted(plan, *rest[:4], rest[4], rest[5], 0, side[pair].cuda_stream)
                stream.wait_stream(side[pair])
        else:
            _native.Executor.execute_counted_group(group, stream.cuda_stream)
        ranks.synchronize()
        expected = torch.arange(count, dtype=torch.float32, device=device) + 1000 * frm + call
        if not torch.equal(target, expected):
            print(f"[rank {rank}] FAIL call {call} ({count} elements): the ring's values differ", flush=True)
            failures += 1
    # No rank tears down while a peer's last kernel may still write into its memory (ranks sharing a GPU
    # share one process: a freed buffer is gone at once, and the peer's kernel faults).
    bootstrap.barrier()
    print(
        f"[rank {rank}] {calls} calls of {kind}, {'separate launches' if separate else 'one launch'}: "
        f"{failures} failed",
        flush=True,
    )
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ranks.add_arguments(parser)
    parser.add_argument("--plan", choices=["packet", "pair"], default="packet")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--separate", action="store_true", help="each pair's call a launch of its own")
    args = parser.parse_args()
    return ranks.run(args, lambda bootstrap: check_rank(bootstrap, args.plan, args.calls, args.separate))


if __name__ == "__main__":
    sys.exit(main())
