"""A stand-in for the part of CuPy that bench/nvlink_ceiling.py uses, over host memory: device buffers are
numpy byte arrays at made-up addresses, kernels and peer copies move bytes between them at once, events
time nothing. Enough to run the bench's logic (which addresses each pattern copies, whether its check
finds every slot filled) on a host without GPUs."""

from __future__ import annotations

import types

import numpy as np


def make_fake_cupy(gpus: int) -> types.ModuleType:
    memory: dict[int, np.ndarray] = {}  # base address -> bytes
    next_base = [1 << 20]

    def view(address: int, size: int) -> np.ndarray:
        for base, data in memory.items():
            if base <= address and address + size <= base + data.size:
                return data[address - base : address - base + size]
        raise RuntimeError(f"fake cupy: no buffer holds {size} bytes at {address:#x}")

    class Array:
        def __init__(self, values: np.ndarray, base: int | None = None) -> None:
            self.values = values
            self.data = types.SimpleNamespace(ptr=base)

        def __getitem__(self, key: slice) -> Array:
            return Array(self.values[key])

        def __ne__(self, other: object) -> Array:  # type: ignore[override]
            return Array(self.values != other)

        def sum(self) -> int:
            return int(self.values.sum())

        def fill(self, value: int) -> None:
            self.values[:] = value

    def allocate(count: int, dtype, value: int = 0) -> Array:
        raw = np.zeros(count * np.dtype(dtype).itemsize, dtype=np.uint8)
        base = next_base[0]
        next_base[0] += raw.size + (1 << 20)
        memory[base] = raw
        values = raw.view(dtype)
        values[:] = value
        return Array(values, base)

    def asarray(values: list[int], dtype) -> Array:
        array = allocate(len(values), dtype)
        array.values[:] = values
        return array

    class Kernel:
        def __init__(self, name: str) -> None:
            self.name = name

        def __call__(self, grid, block, args) -> None:
            if self.name.startswith("copy_pairs"):
                sources, destinations, units = args[0], args[1], int(args[2])
                pairs = zip(sources.values, destinations.values, strict=True)
            else:  # fan_out: one source, `count` destinations
                sources, destinations, count, units = args[0], args[1], int(args[2]), int(args[3])
                pairs = ((sources.values[0], destination) for destination in destinations.values[:count])
            for source, destination in pairs:
                view(int(destination), units * 16)[:] = view(int(source), units * 16)

    class Context:
        def __enter__(self):
            return self

        def __exit__(self, *exc) -> bool:
            return False

    class Stream(Context):
        def __init__(self, non_blocking: bool = False) -> None:
            self.ptr = id(self)

        def wait_event(self, event) -> None:
            pass

    class Event:
        def __init__(self, disable_timing: bool = False) -> None:
            pass

        def record(self, stream=None) -> None:
            pass

    class Device(Context):
        def __init__(self, index: int) -> None:
            self.index = index

        def synchronize(self) -> None:
            pass

    class RawModule:
        def __init__(self, code: str, options=()) -> None:
            pass

        def get_function(self, name: str) -> Kernel:
            return Kernel(name)

    def memcpy_peer_async(dst: int, dst_device: int, src: int, src_device: int, size: int, stream: int) -> None:
        view(dst, size)[:] = view(src, size)

    runtime = types.SimpleNamespace(
        CUDARuntimeError=RuntimeError,
        getDeviceCount=lambda: gpus,
        deviceCanAccessPeer=lambda a, b: True,
        deviceEnablePeerAccess=lambda peer: None,
        memcpyPeerAsync=memcpy_peer_async,
        getDeviceProperties=lambda index: {"name": b"Fake GPU"},
    )
    module = types.ModuleType("cupy")
    module.uint8, module.uint64, module.int32 = np.uint8, np.uint64, int
    module.full = lambda count, value, dtype: allocate(count, dtype, value)
    module.zeros = lambda count, dtype: allocate(count, dtype)
    module.asarray = asarray
    module.RawModule = RawModule
    module.cuda = types.SimpleNamespace(
        Device=Device, Stream=Stream, Event=Event, runtime=runtime, get_elapsed_time=lambda start, stop: 1.0
    )
    return module
