"""One process driving every visible GPU through CuPy's NCCL bindings, for tests/nccl/test_nccl_one_process_gpu.py:
NcclCommunicator.initAll over the devices, then collectives issued for every device inside one
groupStart/groupEnd, with random data per call checked against a float64 reference. The mode of nccl-tests
`-g N`, CuPy and torch.nn.DataParallel. It knows nothing of Loom. Prints "OK" at the end.

    python cupy_init_all.py [SIZES_BYTES...]
"""

from __future__ import annotations

import sys

import cupy
import numpy as np
from cupy.cuda import nccl


def run(devices: list[int], comms: list, elements: int, seed: int) -> None:
    world = len(devices)
    rng = np.random.default_rng(seed)
    host = [rng.standard_normal(elements * world).astype(np.float32) for _ in devices]
    sends, reduced, gathered, scattered, averaged, streams = [], [], [], [], [], []
    for index, device in enumerate(devices):
        with cupy.cuda.Device(device):
            sends.append(cupy.asarray(host[index]))
            reduced.append(cupy.full(elements * world, np.nan, dtype=np.float32))
            gathered.append(cupy.full(elements * world * world, np.nan, dtype=np.float32))
            scattered.append(cupy.full(elements, np.nan, dtype=np.float32))
            averaged.append(cupy.full(elements * world, np.nan, dtype=np.float32))
            streams.append(cupy.cuda.Stream(non_blocking=True))
    # Current device left at the first GPU, as a user's loop leaves it: each call must still run on its own.
    cupy.cuda.Device(devices[0]).use()
    nccl.groupStart()
    for index in range(world):
        comm, stream = comms[index], streams[index].ptr
        count = elements * world
        comm.allReduce(sends[index].data.ptr, reduced[index].data.ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream)
        comm.allGather(sends[index].data.ptr, gathered[index].data.ptr, count, nccl.NCCL_FLOAT32, stream)
        comm.reduceScatter(
            sends[index].data.ptr, scattered[index].data.ptr, elements, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream
        )
        comm.allReduce(sends[index].data.ptr, averaged[index].data.ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_AVG, stream)
    nccl.groupEnd()
    total = sum(x.astype(np.float64) for x in host)
    for index, device in enumerate(devices):
        with cupy.cuda.Device(device):
            streams[index].synchronize()
            check(f"allReduce on GPU {device}", reduced[index].get(), total)
            check(f"allGather on GPU {device}", gathered[index].get(), np.concatenate(host))
            check(
                f"reduceScatter on GPU {device}",
                scattered[index].get(),
                total[index * elements : (index + 1) * elements],
            )
            check(f"allReduce avg on GPU {device}", averaged[index].get(), total / world)


def check(what: str, got: np.ndarray, want: np.ndarray) -> None:
    if np.isnan(got).any():
        raise AssertionError(f"{what}: {int(np.isnan(got).sum())} elements not written")
    error = np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want), 1e-30)
    if error > 1e-6:
        raise AssertionError(f"{what}: relative error {error:.3g}")


def main() -> None:
    sizes = [int(text) for text in sys.argv[1:]] or [1024, 65536, 4 << 20]
    devices = list(range(cupy.cuda.runtime.getDeviceCount()))
    comms = nccl.NcclCommunicator.initAll(devices)
    for seed, size in enumerate(sizes):
        run(devices, comms, max(1, size // 4 // len(devices)), seed)
        print(f"size {size} ok", flush=True)
    for comm in comms:
        comm.destroy()
    print("OK", flush=True)


if __name__ == "__main__":
    main()
