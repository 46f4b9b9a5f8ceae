"""Write your own collective in the DSL, then compile, verify, register and run it.

The algorithm: a two-step all-reduce for one node (the tutorial of docs/dsl.md). Rank r owns chunk r:
every rank puts its piece of chunk p into rank p's scratch; rank r adds up the pieces of chunk r and
puts the sum into every peer's output.

    python examples/user_algorithm.py                                 # 4 ranks on the CPU backend
    python -m loom.launch -n 2 examples/user_algorithm.py --gpu       # one process per GPU (torch)

`loom compile examples/user_algorithm.py --world-size 4` compiles the same file from the command line.
"""

from __future__ import annotations

import argparse
import os

from loom.language import AllReduce, Buffer, CollectiveProgram, MemoryChannel, Rank


def build(world_size=4, name="user_allreduce_two_step"):
    n = world_size
    with CollectiveProgram(f"{name}_{n}r", AllReduce(n, 1, False), n, protocol="Simple") as program:
        scratch = [Buffer(r, n) for r in range(n)]  # n chunks of scratch on every rank
        # One channel per pair and thread block: a channel's waits must all be in one thread block.
        scatter = {(r, p): MemoryChannel(p, r) for r in range(n) for p in range(n) if p != r}  # tb 0
        gather = {(r, p): MemoryChannel(p, r) for r in range(n) for p in range(n) if p != r}  # tb 1
        for r in range(n):
            rank = Rank(r)
            inp, out = rank.get_input_buffer(), rank.get_output_buffer()
            peers = [p for p in range(n) if p != r]
            for p in peers:  # step 1: my piece of chunk p goes to its owner
                scatter[(r, p)].put(scratch[p][r : r + 1], inp[p : p + 1], tb=0)
                scatter[(r, p)].signal(tb=0)
            for p in peers:
                scatter[(r, p)].wait(tb=0)
            others = [scratch[r][p : p + 1] for p in peers]
            rank.reduce(inp[r : r + 1], others, tb=0, dst_chunk=out[r : r + 1])  # step 2: add up chunk r
            for p in peers:  # step 3: the sum of chunk r goes into every peer's output
                gather[(r, p)].put(Rank(p).get_output_buffer()[r : r + 1], out[r : r + 1], tb=1)
                gather[(r, p)].signal(tb=1)
            for p in peers:
                gather[(r, p)].wait(tb=1)
    return program


def compile_verify_register(world_size: int) -> str:
    """Compile this file (cached under <cache root>/jit), prove the plan right, and register it."""
    import loom
    from loom.verify import verify

    plan = loom.compile(__file__, {"world_size": world_size})  # a second run reads the plan from the cache
    findings = verify(plan.path)  # loom.compile verified it too; this is how to do it yourself
    if findings:
        raise SystemExit(f"{plan.name} is wrong: {findings[0]}")
    loom.register_plan(plan, tags=["example"], replace=True)
    return plan.name


def run_on_cpu(world_size: int) -> None:
    import numpy as np
    from loom import Communicator
    from loom.runtime import registry
    from loom.runtime.host_ranks import run_ranks

    name = compile_verify_register(world_size)
    count = 4096 * world_size
    inputs = [np.random.default_rng(rank).standard_normal(count).astype(np.float32) for rank in range(world_size)]
    expected = sum(x.astype(np.float64) for x in inputs)

    def rank_body(bootstrap):
        comm = Communicator(bootstrap, host_only=True)
        output = np.empty(count, np.float32)
        comm.all_reduce(inputs[comm.rank], output=output)  # out of place: the selector picks our plan
        return float(abs(output - expected).max())

    for rank, outcome in sorted(run_ranks(world_size, None, rank_body).items()):
        if isinstance(outcome, BaseException):
            raise outcome
        print(f"rank {rank}: all-reduce of {count} floats, max error {outcome:.2e}")
    chosen = registry.select("allreduce", count * 4, "float32", world_size, world_size).name
    print(f"the selector chose {chosen} (registered as {name})")


def run_on_gpu() -> None:
    import torch
    from loom import Communicator

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    comm = Communicator()
    compile_verify_register(comm.world_size)
    count = 1 << 20
    inputs = [torch.randn(count, generator=torch.Generator().manual_seed(r)).cuda() for r in range(comm.world_size)]
    output = torch.empty(count, device="cuda")
    comm.all_reduce(inputs[comm.rank], output=output)
    error = (output.double() - sum(x.double() for x in inputs)).abs().max().item()
    print(f"rank {comm.rank}: all-reduce of {count} floats on GPU {comm.native.cuda_device}, max error {error:.2e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="run on GPUs, one process each (under loom.launch)")
    parser.add_argument("--ranks", type=int, default=4, help="ranks on the CPU backend (default 4)")
    arguments = parser.parse_args()
    run_on_gpu() if arguments.gpu else run_on_cpu(arguments.ranks)
