"""Symmetric windows on GPUs (issue 39, registered buffers): two torch tensors registered with
``Communicator.register``, all-gathers of 1.5 MB (``allgather_fullmesh``: puts into the peers' outputs) at
several offsets of them, each output against the reference bit for bit; one call sets up and exchanges, the
others find every rank's buffers from the windows (executor stats); then a CUDA graph captured at one offset
and replayed with new data; after ``close()`` a call exchanges again. One process per GPU, or N ranks as
threads sharing GPU 0:

    python -m loom.launch -n 2 tests/executor/gpu/symmetric_window_check.py
    python tests/executor/gpu/symmetric_window_check.py --share-gpu 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import loom
import torch
from loom import _native
from loom.compiler.driver import compile_algorithm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ranks  # noqa: E402

PIECE = 393216  # float32 elements per rank and call: 1.5 MB, in allgather_fullmesh's range
SLOTS = 4  # places in the windows


def _fill(source: torch.Tensor, rank: int, call: int) -> None:
    source.copy_(torch.arange(PIECE, dtype=torch.float32, device=source.device) % 4093 + 10000 * rank + call)


def _expected(world: int, call: int, device: torch.device) -> torch.Tensor:
    piece = torch.arange(PIECE, dtype=torch.float32, device=device) % 4093
    return torch.cat([piece + 10000 * r + call for r in range(world)])


def check_rank(bootstrap) -> int:
    comm = loom.Communicator(bootstrap)
    world, rank = comm.world_size, comm.rank
    device = torch.device("cuda", torch.cuda.current_device())
    plan = _native.Plan.parse(compile_algorithm("allgather_fullmesh", world, verify=False))
    sources = torch.zeros(SLOTS * PIECE, dtype=torch.float32, device=device)
    targets = torch.zeros(SLOTS * PIECE * world, dtype=torch.float32, device=device)
    failures, calls = 0, 0

    def call_at(slot: int, call: int | None) -> torch.Tensor:
        """The all-gather at `slot`, its input first filled for `call` (None: left as it is)."""
        source = sources[slot * PIECE : (slot + 1) * PIECE]
        target = targets[slot * PIECE * world : (slot + 1) * PIECE * world]
        if call is not None:
            _fill(source, rank, call)
        comm.executor.execute(plan, source, target)
        return target

    def compare(target: torch.Tensor, call: int, what: str) -> int:
        ranks.synchronize()
        if torch.equal(target, _expected(world, call, device)):
            return 0
        print(f"[rank {rank}] FAIL {what}, call {call}: output differs from the reference", flush=True)
        return 1

    source_window, target_window = comm.register(sources), comm.register(targets)
    for call, slot in enumerate([0, 2, 1, 3, 0]):
        failures += compare(call_at(slot, call), call, f"eager call at slot {slot}")
        calls += 1
    stats = comm.executor.stats()
    if (stats["buffer_exchanges"], stats["window_calls"]) != (1, calls):
        print(
            f"[rank {rank}] FAIL exchanges {stats['buffer_exchanges']}, window calls {stats['window_calls']}; "
            f"expected 1 and {calls}",
            flush=True,
        )
        failures += 1
    # The graph holds the call alone; each replay's input is filled before it.
    graph = torch.cuda.CUDAGraph()
    with ranks.capture(graph):
        target = call_at(2, None)
    for call in range(5, 8):
        _fill(sources[2 * PIECE : 3 * PIECE], rank, call)
        graph.replay()
        failures += compare(target, call, "graph replay")
    source_window.close()
    target_window.close()
    failures += compare(call_at(1, 9), 9, "after the windows are closed")
    stats = comm.executor.stats()
    if stats["buffer_exchanges"] != 2:
        print(f"[rank {rank}] FAIL exchanges after close: {stats['buffer_exchanges']}, expected 2", flush=True)
        failures += 1
    print(f"[rank {rank}] symmetric windows: {failures} failures", flush=True)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ranks.add_arguments(parser)
    return ranks.run(parser.parse_args(), check_rank)


if __name__ == "__main__":
    sys.exit(main())
