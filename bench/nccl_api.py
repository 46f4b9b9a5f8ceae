"""Any library with NCCL's C API (plain NCCL, libloom_nccl.so, MSCCL++'s libmscclpp_nccl.so) called through
ctypes on torch tensors, so that benchmarks can put several of them side by side in one process without
LD_PRELOAD: a communicator over every rank (the unique id shared by the caller), its collectives on a CUDA
stream (also under graph capture), and splits.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

# ncclDataType_t and ncclRedOp_t values of nccl.h.
NCCL_TYPES = {"float16": 6, "float32": 7, "bfloat16": 9}
NCCL_SUM = 0

_POINTER, _SIZE, _INT = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def torch_nccl() -> str:
    """The libnccl.so.2 torch ships with (its wheel's), else the loader's."""
    import torch

    for folder in Path(torch.__file__).parent.parent.glob("nvidia/nccl/lib"):
        for library in folder.glob("libnccl.so*"):
            return str(library)
    return "libnccl.so.2"


class NcclApi:
    """One library and one communicator of it over every rank. ``share_id(bytes) -> bytes`` hands rank 0's
    unique id to every rank (a broadcast of the caller's choosing)."""

    def __init__(self, path: str, rank: int, world: int, share_id: Callable[[bytes], bytes]) -> None:
        self.path = path
        self.lib = ctypes.CDLL(path)
        signatures = {
            "ncclAllReduce": [_POINTER, _POINTER, _SIZE, _INT, _INT, _POINTER, _POINTER],
            "ncclReduceScatter": [_POINTER, _POINTER, _SIZE, _INT, _INT, _POINTER, _POINTER],
            "ncclAllGather": [_POINTER, _POINTER, _SIZE, _INT, _POINTER, _POINTER],
            "ncclReduce": [_POINTER, _POINTER, _SIZE, _INT, _INT, _INT, _POINTER, _POINTER],
            "ncclSend": [_POINTER, _SIZE, _INT, _INT, _POINTER, _POINTER],
            "ncclRecv": [_POINTER, _SIZE, _INT, _INT, _POINTER, _POINTER],
        }
        for name, arguments in signatures.items():
            getattr(self.lib, name).argtypes = arguments
        self.rank, self.world = rank, world
        uid = UniqueId()
        if rank == 0:
            self.check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        ctypes.memmove(ctypes.byref(uid), share_id(bytes(uid)), 128)
        self.comm = ctypes.c_void_p()
        self.check(self.lib.ncclCommInitRank(ctypes.byref(self.comm), world, uid, rank), "ncclCommInitRank")
        self.splits: list[ctypes.c_void_p] = []

    def check(self, result: int, what: str) -> None:
        if result != 0:
            raise RuntimeError(f"{what} of {self.path} returned {result}")

    def split(self, color: int, key: int) -> ctypes.c_void_p:
        child = ctypes.c_void_p()
        self.check(self.lib.ncclCommSplit(self.comm, color, key, ctypes.byref(child), None), "ncclCommSplit")
        self.splits.append(child)
        return child

    @staticmethod
    def _type(tensor) -> int:
        return NCCL_TYPES[str(tensor.dtype).split(".")[-1]]

    def all_reduce(self, source, output, stream: int, comm=None) -> None:
        self.check(
            self.lib.ncclAllReduce(
                source.data_ptr(),
                output.data_ptr(),
                source.numel(),
                self._type(source),
                NCCL_SUM,
                comm or self.comm,
                stream,
            ),
            "ncclAllReduce",
        )

    def reduce_scatter(self, source, output, stream: int) -> None:
        self.check(
            self.lib.ncclReduceScatter(
                source.data_ptr(), output.data_ptr(), output.numel(), self._type(source), NCCL_SUM, self.comm, stream
            ),
            "ncclReduceScatter",
        )

    def all_gather(self, source, output, stream: int) -> None:
        self.check(
            self.lib.ncclAllGather(
                source.data_ptr(), output.data_ptr(), source.numel(), self._type(source), self.comm, stream
            ),
            "ncclAllGather",
        )

    def reduce(self, source, output, root: int, stream: int) -> None:
        self.check(
            self.lib.ncclReduce(
                source.data_ptr(),
                output.data_ptr(),
                source.numel(),
                self._type(source),
                NCCL_SUM,
                root,
                self.comm,
                stream,
            ),
            "ncclReduce",
        )

    def all_to_all(self, source, output, stream: int) -> None:
        """As torch builds it: a group of one send to and one receive from every rank."""
        piece = source.numel() // self.world
        self.all_to_all_v(source, output, [piece] * self.world, [piece] * self.world, stream)

    def all_to_all_v(self, source, output, send_counts: list[int], recv_counts: list[int], stream: int) -> None:
        """As torch's all_to_all_single with splits: the pieces back to back in rank order, one send to and one
        receive from every rank in a group (elements of the tensors' type)."""
        size = source.element_size()
        kind = self._type(source)

        def calls() -> None:
            sent = received = 0
            for peer in range(self.world):
                self.send(source.data_ptr() + sent * size, send_counts[peer], kind, peer, stream)
                self.recv(output.data_ptr() + received * size, recv_counts[peer], kind, peer, stream)
                sent += send_counts[peer]
                received += recv_counts[peer]

        self.group(calls)

    def send(self, address: int, count: int, kind: int, peer: int, stream: int) -> None:
        self.check(self.lib.ncclSend(address, count, kind, peer, self.comm, stream), "ncclSend")

    def recv(self, address: int, count: int, kind: int, peer: int, stream: int) -> None:
        self.check(self.lib.ncclRecv(address, count, kind, peer, self.comm, stream), "ncclRecv")

    def group(self, calls: Callable[[], None]) -> None:
        """``calls()`` between ncclGroupStart and ncclGroupEnd."""
        self.check(self.lib.ncclGroupStart(), "ncclGroupStart")
        try:
            calls()
        finally:
            self.check(self.lib.ncclGroupEnd(), "ncclGroupEnd")

    def close(self) -> None:
        for comm in [*self.splits, self.comm]:
            self.lib.ncclCommDestroy(comm)
        self.splits.clear()
