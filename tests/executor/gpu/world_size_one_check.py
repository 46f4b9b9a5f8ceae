"""A job of one rank on a GPU, as a new user starts it (issue 22: this all-reduce killed the process):

    python -m loom.launch -n 1 tests/executor/gpu/world_size_one_check.py

Every collective with torch tensors of several dtypes, in place and out of place, send/recv to itself
and calls of 0 elements, eagerly and inside torch.cuda.graph capture (replayed on new data); the output
must equal the input bit for bit. A NumPy array on a GPU communicator is a clear error, not a crash.
"""

from __future__ import annotations

import os
import sys

import loom
import numpy as np
import torch

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]


def random(count: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    values = torch.randn(count, generator=torch.Generator().manual_seed(seed)) * 100
    return values.to(dtype).cuda()


def calls(comm: loom.Communicator) -> list:
    """(name, call(source, out)) for every collective; `out` is `source` itself for the in-place forms."""
    return [
        ("all_reduce", lambda s, o: comm.all_reduce(s, output=None if o is s else o)),
        ("all_reduce max", lambda s, o: comm.all_reduce(s, "max", output=None if o is s else o)),
        ("all_gather", lambda s, o: comm.all_gather(o, s)),
        ("reduce_scatter", lambda s, o: comm.reduce_scatter(o, s)),
        ("all_to_all", lambda s, o: comm.all_to_all(o, s)),
        ("send/recv to itself", lambda s, o: (comm.send(s, peer=0), comm.recv(o, peer=0))),
    ]


def main() -> int:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    comm = loom.Communicator()
    assert comm.world_size == 1 and comm.on_gpu, (comm.world_size, comm.on_gpu)
    failures = 0

    def check(what: str, got: torch.Tensor, expected: torch.Tensor) -> None:
        nonlocal failures
        torch.cuda.synchronize()
        if not torch.equal(got, expected):
            failures += 1
            print(f"FAIL {what}: output differs from the input", flush=True)

    for dtype in DTYPES:
        for count in (1, 1037, 1 << 20):
            for name, call in calls(comm):
                source = random(count, dtype, count)
                out = torch.full_like(source, 3)
                call(source, out)
                check(f"{name} {dtype} x{count} out of place", out, source)
            t = random(count, dtype, 5)
            expected = t.clone()
            comm.all_reduce(t)
            comm.broadcast(t, root=0)
            comm.all_gather(t, t)
            check(f"in place {dtype} x{count}", t, expected)
    empty = torch.empty(0, device="cuda")
    comm.all_reduce(empty)
    comm.all_gather(empty, empty)
    try:
        comm.all_reduce(np.ones(8, np.float32))
        failures += 1
        print("FAIL a NumPy array on a GPU communicator was not refused", flush=True)
    except loom.InvalidArgumentError as error:
        assert "lives on cpu" in str(error), error

    # Captured once, replayed on new data copied into the captured buffers.
    source = torch.empty(4099, device="cuda")
    outs = {name: torch.empty_like(source) for name, _ in calls(comm)}
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for name, call in calls(comm):
            call(source, outs[name])
    for replay in range(3):
        source.copy_(random(4099, torch.float32, 100 + replay))
        graph.replay()
        for name, out in outs.items():
            check(f"graph {name} replay {replay}", out, source)
    print(f"world size 1 on GPU: {failures} failures", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
