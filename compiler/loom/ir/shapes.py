"""How a collective shapes each rank's buffers: chunk counts, and how many per-rank slots a buffer
holds (docs/plan-format.md, "Buffers, chunks and bytes")."""

from __future__ import annotations

# collective -> (input slots, output slots) for world size n; "n" stands for the world size.
_SLOTS = {
    "allreduce": (1, 1),
    "broadcast": (1, 1),
    "reduce": (1, 1),
    "sendrecv": (1, 1),
    "allgather": (1, "n"),
    "reducescatter": ("n", 1),
    "alltoall": ("n", "n"),
    "alltoallv": ("n", "n"),  # slots sized per call by the call table
    "test": (1, 1),  # MSCCL++'s TestCollective: any chunk counts, no postcondition
}


def buffer_slots(collective: str, buffer: str, world_size: int) -> int:
    """How many equal per-rank slots the buffer is cut into (scratch: one)."""
    if buffer == "scratch":
        return 1
    value = _SLOTS[collective][0 if buffer == "input" else 1]
    return world_size if value == "n" else value


def buffer_chunks(collective: str, world_size: int, chunks_per_slot: int) -> tuple[int, int]:
    """(input_chunks, output_chunks) when every slot is cut into chunks_per_slot chunks."""
    return (
        buffer_slots(collective, "input", world_size) * chunks_per_slot,
        buffer_slots(collective, "output", world_size) * chunks_per_slot,
    )


def inplace_alias(
    collective: str, rank: int, input_chunks: int, output_chunks: int, buffer: str, index: int
) -> tuple[str, int]:
    """The one name of a chunk in an in-place plan, where input and output share memory.

    All-gather: the input is the rank's own slot of the output, so input chunk i is output chunk
    rank x input_chunks + i. Reduce-scatter: the output is the rank's own slot of the input, so
    output chunk i is input chunk rank x output_chunks + i. Every other collective: input chunk i
    is output chunk i (named input here).
    """
    if collective == "allgather":
        return ("output", rank * input_chunks + index) if buffer == "input" else (buffer, index)
    if collective == "reducescatter":
        return ("input", rank * output_chunks + index) if buffer == "output" else (buffer, index)
    return ("input", index) if buffer == "output" else (buffer, index)
