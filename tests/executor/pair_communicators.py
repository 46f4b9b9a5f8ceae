"""A communicator of two for each pair of ranks a rank is in, made by split, as the NCCL library's links are:
the checks of Executor.execute_counted_group (tests/executor/test_counted_group.py on the CPU backend,
tests/executor/gpu/counted_group_check.py on GPUs)."""

from __future__ import annotations


def pair_communicators(comm) -> dict[tuple[int, int], object]:
    """Collective over ``comm``: every rank takes part in every split, pairs (lower rank, higher rank) in one
    global order, and gets the communicators of the pairs it is in; in each, the lower rank is rank 0."""
    world, rank = comm.world_size, comm.rank
    mine = {}
    for pair in [(a, b) for a in range(world) for b in range(a + 1, world)]:
        split = comm.split(0 if rank in pair else None)
        if split is not None:
            mine[pair] = split
    return mine
