"""Faults on GPUs through loom.Communicator (issue 41), run by tests/executor/test_gpu_faults.py:

    python tests/executor/gpu/fault_check.py abort [--share-gpu N]   # under loom.launch, or N threads on GPU 0
    python tests/executor/gpu/fault_check.py kill                    # plain processes, one per GPU
    python tests/executor/gpu/fault_check.py stalled --share-gpu 4   # N threads on GPU 0

abort: rank 0 launches an all-reduce that the other ranks never join, so its kernel spins; abort() from
the host must end it within 1 s, and the kernel must return rather than trap: the CUDA context stays
usable, and every rank then builds a new communicator and checks an all-reduce against float64.

kill: the last rank SIGKILLs itself while the others' kernels wait on it. Each survivor's next call (and a
watchdog thread's comm.error(), as torch's watchdog asks NCCL) must fail within 1 s, naming the dead rank;
abort() takes under 1 s; the context stays usable; the survivors build a communicator among themselves
(one rank on two GPUs) and check an all-reduce against float64.

stalled: the third rank never makes a small all-reduce (an LL packet plan) that the others make; their packet
reads time out (the kernel traps, so the context is gone after), and the error of a rank whose own read timed
out names the stalled rank as the one whose packet did not come (the record holds the packet's address).

Each rank prints ``RESULT {...}``; a failed check prints FAIL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import loom
import torch
from loom import _native

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ranks  # noqa: E402
from fault_timing import ErrorWatch, die_soon, write_stamp  # noqa: E402

ELEMENTS = 1 << 20  # 4 MiB of float32, one rank per GPU
# Ranks sharing GPU 0 run a 64 KiB all-reduce: its plan's few blocks fit beside the others' (4 MiB plans use
# a block per multiprocessor, and the executor refuses them on a shared GPU, since they would wait on each other).
SHARED_ELEMENTS = 1 << 14


def report(**fields: object) -> None:
    # One write: ranks that are threads of one process print at once, and print() writes the end apart.
    sys.stdout.write("RESULT " + json.dumps(fields) + "\n")
    sys.stdout.flush()


def fail(rank: int, what: str) -> None:
    print(f"rank {rank} FAIL: {what}", flush=True)


def new_bootstrap(base: object, members: list[int]) -> object:
    """A bootstrap of `members` (ranks of `base`, the first makes the id), or None for a rank outside them."""
    if base.rank not in members:
        return None
    first = members[0]
    if base.rank == first:
        uid = _native.UniqueId.create("127.0.0.1")
        for peer in members[1:]:
            base.send(peer, 91, uid.to_bytes())
    else:
        uid = _native.UniqueId.from_bytes(base.recv(first, 91))
    return _native.Bootstrap(members.index(base.rank), len(members), uid, timeout_ms=base.timeout_ms)


def started_communicator(base: object) -> tuple[object, loom.Communicator, torch.Tensor]:
    """A communicator of every rank on a bootstrap of its own (closed after an abort), with one all-reduce of
    its data done and every rank past it."""
    bootstrap = new_bootstrap(base, list(range(base.world_size)))
    comm = loom.Communicator(bootstrap)
    data = torch.ones(elements(base), device="cuda")
    comm.all_reduce(data)
    ranks.synchronize()
    base.barrier()
    return bootstrap, comm, data


def elements(base: object) -> int:
    """The all-reduce's length: smaller where ranks share a GPU (threads on GPU 0, which ranks.run marks with
    LOOM_SHARE_GPU=1; comparing the world size with the GPU count misses 2 ranks on GPU 0 of a 2-GPU host)."""
    shared = os.environ.get("LOOM_SHARE_GPU") == "1" or base.world_size > torch.cuda.device_count()
    return SHARED_ELEMENTS if shared else ELEMENTS


def checked_all_reduce(comm: loom.Communicator, seed: int) -> bool:
    """An all-reduce of fresh random data against the float64 sum of every rank's input."""
    inputs = [
        torch.randn(elements(comm), generator=torch.Generator().manual_seed(seed + r)) for r in range(comm.world_size)
    ]
    expected = torch.stack([x.double() for x in inputs]).sum(0).float()
    mine = inputs[comm.rank].cuda()
    comm.all_reduce(mine)
    ranks.synchronize()
    return torch.allclose(mine.cpu(), expected, rtol=1e-5, atol=1e-5)


def context_alive() -> bool:
    """The CUDA context still runs work: a trap would have made this raise."""
    try:
        x = torch.arange(1000, device="cuda", dtype=torch.float32)
        total = float(x.sum())
        ranks.synchronize()
        return total == 499500.0
    except RuntimeError:
        return False


def abort_case(base: object) -> int:
    rank, world = base.rank, base.world_size
    failures = 0
    bootstrap, comm, data = started_communicator(base)
    abort_s, ended, stopped = 0.0, True, ""
    if rank == 0:
        # The others never join: the kernel waits on them (on its own thread, in case the call waits on the
        # host for them first: the abort ends that too).
        stream = torch.cuda.current_stream()

        raised: list[str] = []

        def in_flight() -> None:
            with torch.cuda.stream(stream):
                try:
                    comm.all_reduce(data)
                except loom.LoomError as error:
                    raised.append(str(error))  # the abort came while the call still waited on the host

        thread = threading.Thread(target=in_flight)
        thread.start()
        time.sleep(0.3)
        native = comm.native  # the device's record outlives the abort while this holds the communicator
        started = time.monotonic()
        ended = comm.abort(wait_s=5.0)
        abort_s = time.monotonic() - started
        thread.join(5)
        ranks.synchronize()  # the kernel returned: nothing waits here
        stopped = native.device_timeout_report() or ""
        del native
        if "the communicator was aborted" not in stopped and not any("abort" in text for text in raised):
            failures += 1
            fail(rank, f"the kernel left no record of the abort: {stopped!r}")
        if not ended or abort_s >= 1.0:
            failures += 1
            fail(rank, f"abort took {abort_s:.3f} s (ended: {ended})")
    base.barrier()
    if rank != 0:
        comm.abort()
    bootstrap.close()
    if not context_alive():
        failures += 1
        fail(rank, "the CUDA context is no longer usable after the abort")
    base.barrier()
    recovered = loom.Communicator(new_bootstrap(base, list(range(world))))
    if not checked_all_reduce(recovered, 100):
        failures += 1
        fail(rank, "the all-reduce of the new communicator differs from float64")
    report(rank=rank, abort_s=abort_s, abort_ended=ended, stopped=stopped)
    return failures


def kill_case(base: object) -> int:
    rank, world = base.rank, base.world_size
    victim = world - 1
    stamp = Path(os.environ["LOOM_TEST_SCRATCH"]) / "killed_at"
    bootstrap, comm, data = started_communicator(base)
    if rank == victim:
        die_soon(0.3, write_stamp(stamp))
    watch = ErrorWatch(comm.error)  # every 50 ms, as torch's watchdog asks NCCL
    calls = 0
    try:
        while True:
            comm.all_reduce(data)
            calls += 1
            if calls % 8 == 0:
                ranks.synchronize()  # keeps the queue short, as a training step's own work would
    except loom.LoomError as error:
        failed_at, message = time.time(), str(error)
    watch.stop()
    started = time.monotonic()
    ended = comm.abort(wait_s=5.0)
    abort_s = time.monotonic() - started
    bootstrap.close()
    alive = context_alive()
    killed_at = float(stamp.read_text())
    survivors = list(range(world - 1))
    recovered = loom.Communicator(new_bootstrap(base, survivors))
    correct = checked_all_reduce(recovered, 200)
    record = {
        "rank": rank,
        "calls": calls,
        "detect_s": failed_at - killed_at,
        "watch_s": watch.at - killed_at if watch.at is not None else None,
        "message": message,
        "watched": watch.message,
        "abort_s": abort_s,
        "abort_ended": ended,
        "context_alive": alive,
        "recovered_world": recovered.world_size,
        "recovered_correct": correct,
    }
    report(**record)
    failures = 0
    if record["detect_s"] > 1.0 or record["watch_s"] is None or record["watch_s"] > 1.0:
        failures += 1
        fail(rank, f"the death of rank {victim} was known too late: {record}")
    if str(victim) not in message:
        failures += 1
        fail(rank, f"the error does not name rank {victim}: {message}")
    if not ended or abort_s >= 1.0 or not alive or not correct:
        failures += 1
        fail(rank, f"abort or recovery failed: {record}")
    return failures


def stalled_case(base: object) -> int:
    rank, victim = base.rank, 2
    comm = loom.Communicator(base)
    data = torch.ones(1024, device="cuda")
    comm.all_reduce(data)
    ranks.synchronize()
    base.barrier()
    error = watched = next_call = ""
    if rank != victim:
        try:
            comm.all_reduce(data)
            ranks.synchronize()
        except (loom.LoomError, RuntimeError) as failure:
            error = f"{type(failure).__name__}: {failure}"
        # The trap surfaced in torch's synchronize; Loom explains it to comm.error() (as torch's watchdog asks
        # NCCL) and to the next call, which names the plan op and the peer whose packet did not come.
        watched = str(comm.error() or "")
        try:
            comm.all_reduce(data)
        except (loom.LoomError, RuntimeError) as failure:
            next_call = f"{type(failure).__name__}: {failure}"
    report(rank=rank, error=error, watched=watched, next_call=next_call)
    base.barrier()
    if rank == 0:
        # Every rank has reported; the trapped context would make teardown at exit fail.
        sys.stdout.flush()
        os._exit(0)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["abort", "kill", "stalled"])
    ranks.add_arguments(parser)
    args = parser.parse_args()
    if args.case == "kill":
        base = _native.Bootstrap.from_environment()
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        return 1 if kill_case(base) else 0
    return ranks.run(args, stalled_case if args.case == "stalled" else abort_case)


if __name__ == "__main__":
    sys.exit(main())
