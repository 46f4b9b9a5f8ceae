"""The per-peer entries of a counted call (an ``alltoallv`` plan; docs/executor.md, "counted plans").

A call's table holds, per rank, a send entry to every peer and a receive entry from every peer, each a
(byte offset, bytes) pair into the rank's input or output. ``loom.Communicator.all_to_all`` builds it from
split sizes as torch's ``all_to_all_single`` takes them (rows of dimension 0 per peer, laid out back to
back); ``loom.Executor.execute_counted`` takes entries as they are.

Splits given as a CUDA tensor stay on the device: the entries are computed there, on the call's stream, and
the kernel reads them when it runs, so a CUDA graph replays with whatever the split tensors hold then.
"""

from __future__ import annotations

from collections.abc import Sequence

from loom.errors import InvalidArgumentError

Entry = tuple[int, int]  # (byte offset, bytes)

P2P_PACKET_VARIABLE = "LOOM_P2P_PACKET_BYTES"


def p2p_packet_bytes() -> int:
    """LOOM_P2P_PACKET_BYTES: send/recv of a pair on one node whose message is at most this many bytes runs
    the eager packet plan (alltoallv_packet, one crossing; docs/executor.md), 0 (the default) never. Every
    rank must set the same value: the two ends of a message must pick the same plan."""
    import os

    from loom.compiler.jit_plans import PACKET_CAPACITY_LIMIT

    text = os.environ.get(P2P_PACKET_VARIABLE, "").strip()
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= PACKET_CAPACITY_LIMIT:
        raise InvalidArgumentError(
            f"{P2P_PACKET_VARIABLE}={text!r}: expected a byte count from 0 (off) to {PACKET_CAPACITY_LIMIT}"
        )
    return value


def rows_of(buffer: object, nbytes: int, argument: str) -> tuple[int, int]:
    """(rows, bytes per row) of ``buffer``'s dimension 0 (a 1-D buffer's rows are its elements)."""
    shape = getattr(buffer, "shape", None)
    if shape is None or len(shape) == 0:
        raise InvalidArgumentError(f"{argument}: splits cut dimension 0, but this buffer has no dimensions")
    rows = int(shape[0])
    if rows == 0:
        return 0, 0
    return rows, nbytes // rows


def is_device_splits(splits: object) -> bool:
    """Whether ``splits`` is a CUDA tensor (its counts stay on the device)."""
    return type(splits).__module__.split(".")[0] == "torch" and bool(getattr(splits, "is_cuda", False))


def host_splits(splits: object, world_size: int, rows: int, argument: str) -> list[int]:
    """``splits`` as a list of ``world_size`` row counts (None: ``rows`` cut evenly, as torch does)."""
    if splits is None:
        if rows % world_size:
            raise InvalidArgumentError(
                f"{argument}: without splits the {rows} rows of dimension 0 are cut into {world_size} equal parts,"
                f" which they do not divide into"
            )
        return [rows // world_size] * world_size
    if hasattr(splits, "tolist"):
        splits = splits.tolist()
    if isinstance(splits, (str, bytes)) or not isinstance(splits, Sequence):
        raise InvalidArgumentError(f"{argument}: expected a sequence of {world_size} row counts, got {splits!r}")
    given = list(splits)
    if len(given) != world_size:
        raise InvalidArgumentError(f"{argument}: expected {world_size} row counts (one per rank), got {len(given)}")
    counts = []
    for peer, count in enumerate(given):
        # Any integer (NumPy's too), never a bool or a float.
        index = None if isinstance(count, bool) else getattr(type(count), "__index__", None)
        if index is None or index(count) < 0:
            raise InvalidArgumentError(f"{argument}[{peer}]: expected a row count of 0 or more, got {count!r}")
        counts.append(index(count))
    if sum(counts) > rows:
        raise InvalidArgumentError(f"{argument}: {sum(counts)} rows in all, but the buffer has {rows}")
    return counts


def device_splits(splits: object, world_size: int, rows: int, argument: str, like: object) -> object:
    """``splits`` as a CUDA tensor of ``world_size`` row counts (None: equal pieces, on ``like``'s device)."""
    import torch

    if splits is None:
        return torch.full((world_size,), host_splits(None, world_size, rows, argument)[0], device=like.device)
    if not is_device_splits(splits) or tuple(splits.shape) != (world_size,):
        raise InvalidArgumentError(
            f"{argument}: with splits on the device, expected a CUDA tensor of {world_size} row counts, got"
            f" {type(splits).__name__} of shape {tuple(getattr(splits, 'shape', ()))}"
        )
    return splits


def entries_of(counts: list[int], row_bytes: int) -> list[Entry]:
    """Back-to-back entries of ``counts`` rows of ``row_bytes`` each."""
    entries, offset = [], 0
    for count in counts:
        entries.append((offset * row_bytes, count * row_bytes))
        offset += count
    return entries


def device_entries(send_splits: object, receive_splits: object, send_row_bytes: int, receive_row_bytes: int):
    """The call's 2 x world size entries (sends, then receives) as an int64 CUDA tensor of shape (2n, 2),
    computed from split tensors on the current stream: nothing is read back to the host."""
    import torch

    def entries(splits, row_bytes: int):
        counts = splits.to(torch.int64) * row_bytes
        return torch.stack((torch.cumsum(counts, 0) - counts, counts), dim=1)

    return torch.cat((entries(send_splits, send_row_bytes), entries(receive_splits, receive_row_bytes))).contiguous()


def entries_pointer(entries: object, world_size: int, on_gpu: bool) -> int:
    """The address of a (2 x world size, 2) table of 64-bit (offset, bytes) pairs, checked: a CUDA tensor on
    a GPU communicator, a NumPy array on the CPU backend (which reads it when the call runs)."""
    shape = tuple(getattr(entries, "shape", ()))
    dtype = str(getattr(entries, "dtype", ""))
    if shape != (2 * world_size, 2) or not any(name in dtype for name in ("int64", "uint64")):
        raise InvalidArgumentError(
            f"entries: expected a ({2 * world_size}, 2) table of int64 (offset, bytes) pairs, got shape {shape}"
            f" of {dtype or type(entries).__name__}"
        )
    module = type(entries).__module__.split(".")[0]
    if module == "torch":
        if bool(entries.is_cuda) != on_gpu or not entries.is_contiguous():
            raise InvalidArgumentError(
                "entries: must be a contiguous tensor on the communicator's device (CUDA on a GPU, cpu otherwise)"
            )
        return int(entries.data_ptr())
    if module == "numpy" and not on_gpu:
        if not entries.flags["C_CONTIGUOUS"]:
            raise InvalidArgumentError("entries: must be C-contiguous")
        return int(entries.ctypes.data)
    raise InvalidArgumentError(
        f"entries: expected a {'CUDA tensor' if on_gpu else 'NumPy array'}, got {type(entries).__name__}"
    )


__all__ = [
    "Entry",
    "device_entries",
    "device_splits",
    "entries_of",
    "entries_pointer",
    "host_splits",
    "is_device_splits",
    "rows_of",
]
