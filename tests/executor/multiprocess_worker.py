"""One rank of a multi-process CPU-backend job, for test_multiprocess_cpu.py and test_fault_suite.py.

    python -m loom.launch -n 4 tests/executor/multiprocess_worker.py collectives
    RANK=.. WORLD_SIZE=.. LOCAL_RANK=.. LOCAL_WORLD_SIZE=.. LOOM_BOOTSTRAP_ADDR=.. python ... kill 1

Each mode prints one JSON line per rank (``RESULT {...}``) that the tests read; the launcher's or the
test's own environment sets the rank. Every wait is bounded by LOOM_DEVICE_TIMEOUT_MS and
LOOM_BOOTSTRAP_TIMEOUT_MS, which the tests set low.
"""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import loom
import numpy as np
from fault_timing import ErrorWatch, die, die_soon, write_stamp
from loom import _native
from loom.compiler.driver import compile_algorithm


def report(**fields: object) -> None:
    print("RESULT " + json.dumps(fields), flush=True)


def inputs(world: int, elements: int, dtype: object = np.float32) -> list[np.ndarray]:
    """Every rank's input, the same on every rank (seeded), so each rank can compute the reference."""
    return [np.random.default_rng(1000 + r).integers(-8, 8, elements).astype(dtype) for r in range(world)]


def collectives() -> None:
    """Every collective through loom.Communicator, small (LL, scratch only) and large (plans that write into
    peers' buffers, staged through shared memory), in and out of place, three calls each on fresh data."""
    comm = loom.Communicator(host_only=True)
    rank, world = comm.rank, comm.world_size
    checked = 0
    for elements in (1000, 3 * 65536 + 4 * world):
        for call in range(3):
            data = [x + call for x in inputs(world, elements)]
            total = np.sum(data, axis=0, dtype=np.float64).astype(np.float32)
            out = np.empty_like(data[rank])
            comm.all_reduce(data[rank], output=out)
            assert np.array_equal(out, total), ("all_reduce", elements)
            mine = data[rank].copy()
            comm.all_reduce(mine)
            assert np.array_equal(mine, total), ("all_reduce in place", elements)
            gathered = np.empty(elements * world, np.float32)
            comm.all_gather(gathered, data[rank])
            assert np.array_equal(gathered, np.concatenate(data)), ("all_gather", elements)
            gathered[:] = 0
            gathered[rank * elements : (rank + 1) * elements] = data[rank]
            comm.all_gather(gathered, gathered[rank * elements : (rank + 1) * elements])
            assert np.array_equal(gathered, np.concatenate(data)), ("all_gather in place", elements)
            piece = elements // world
            scattered = np.empty(piece, np.float32)
            comm.reduce_scatter(scattered, data[rank][: piece * world])
            assert np.array_equal(scattered, total[rank * piece : (rank + 1) * piece]), ("reduce_scatter", elements)
            exchanged = np.empty(piece * world, np.float32)
            comm.all_to_all(exchanged, data[rank][: piece * world])
            expected = np.concatenate([data[r][rank * piece : (rank + 1) * piece] for r in range(world)])
            assert np.array_equal(exchanged, expected), ("all_to_all", elements)
            root = 0
            shared = data[rank].copy()
            comm.broadcast(shared, root=root)
            assert np.array_equal(shared, data[root]), ("broadcast", elements)
            peer = (rank + 1) % world
            received = np.empty_like(data[rank])
            if rank % 2 == 0:
                comm.send(data[rank], peer)
                comm.recv(received, (rank - 1) % world)
            else:
                comm.recv(received, (rank - 1) % world)
                comm.send(data[rank], peer)
            assert np.array_equal(received, data[(rank - 1) % world]), ("send/recv", elements)
            checked += 8
    nodes = comm.native.node_count
    report(rank=rank, checked=checked, nodes=nodes, ranks_per_node=comm.ranks_per_node, stages=comm.executor.stats())


def kill(victim: int, where: str) -> None:
    """All-reduce in a loop; the victim SIGKILLs itself. ``where`` = "packets": 4 KiB calls (an LL plan: its
    waits are packet reads, no host exchange), the victim dying from a second thread while its main thread is
    inside a call. "semaphores": the same with 8 MiB calls (a plan of semaphore waits on channels, each eager
    call first meeting the others on the host board). "exchange": 8 MiB calls, the victim dying between
    calls, so the survivors wait for it on the host board. Survivors call until one fails and report the
    error and when it came."""
    comm = loom.Communicator(host_only=True)
    data = np.ones(1024 if where == "packets" else 2 << 20, np.float32)
    comm.all_reduce(data)
    comm.bootstrap.barrier()
    if comm.rank == victim:

        def note(at: float) -> None:
            report(rank=comm.rank, killed_at=at)

        if where == "exchange":
            die(0.2, note)
        die_soon(0.2, note)
    watch = ErrorWatch(comm.error)  # every 50 ms while the calls run, as torch's watchdog asks NCCL
    calls = 0
    try:
        while True:
            comm.all_reduce(data)
            calls += 1
    except loom.LoomError as error:
        failed_at = time.time()
        watch.stop()
        report(
            rank=comm.rank,
            calls=calls,
            failed_at=failed_at,
            kind=type(error).__name__,
            message=str(error),
            watched_at=watch.at,
            watched=watch.message,
        )
    time.sleep(1.0)  # the other survivors fail too before this one goes (and closes its connections)
    try:
        comm.all_reduce(data)
    except loom.LoomError as error:
        report(rank=comm.rank, next_call=str(error))
    started = time.monotonic()
    ended = comm.abort(wait_s=2.0)
    report(rank=comm.rank, abort_s=time.monotonic() - started, abort_ended=ended)
    sys.exit(3)


def silent() -> None:
    """Rank 1 stays alive but never makes the call; rank 0's all-reduce (an LL plan, then a large one) must end
    at the device timeout, the bound for what the host cannot see, naming the wait."""
    base = _native.Bootstrap.from_environment(timeout_ms=30_000)  # outlasts rank 0's failing call
    for elements in (1024, 1 << 19):
        bootstrap = fresh_bootstrap(base, int(os.environ["LOOM_BOOTSTRAP_TIMEOUT_MS"]))
        comm = loom.Communicator(bootstrap, host_only=True)
        data = np.ones(elements, np.float32)
        comm.all_reduce(data)
        base.barrier()
        if base.rank == 0:
            seconds, error = timed_all_reduce(comm, data)
            report(rank=0, elements=elements, seconds=seconds, error=error)
        base.barrier()  # rank 1 stays until rank 0's call has ended
        comm.abort()
        bootstrap.close()


def timed_all_reduce(comm: object, data: np.ndarray) -> tuple[float, str]:
    """One all-reduce expected to fail: how long it took, and its error ("" when it did not fail)."""
    started = time.monotonic()
    try:
        comm.all_reduce(data)
        error = ""
    except loom.LoomError as failure:
        error = f"{type(failure).__name__}: {failure}"
    return time.monotonic() - started, error


def stopped(victim: int) -> None:
    """Rank ``victim`` stops itself (SIGSTOP: alive, silent, its bootstrap connections open) before a small
    all-reduce (an LL packet plan) that the others make; they report their errors, and the test then kills it."""
    comm = loom.Communicator(host_only=True)
    data = np.ones(1024, np.float32)
    comm.all_reduce(data)
    comm.bootstrap.barrier()
    if comm.rank == victim:
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    time.sleep(0.2)  # the victim is stopped by now
    seconds, error = timed_all_reduce(comm, data)
    report(rank=comm.rank, seconds=seconds, error=error)
    comm.abort(wait_s=1.0)


def resources() -> dict[str, int]:
    """Open descriptors, shared-memory segments (memfd files open or mapped), threads and resident KiB."""
    fds = os.listdir("/proc/self/fd")
    memfd_open = 0
    for fd in fds:
        try:
            memfd_open += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:loom-host")
        except OSError:
            pass
    with open("/proc/self/maps", encoding="utf-8") as maps:
        mapped = {line.split()[0] for line in maps if "memfd:loom" in line}
    with open("/proc/self/status", encoding="utf-8") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {
        "fds": len(fds),
        "shm_open": memfd_open,
        "shm_mapped": len(mapped),
        "threads": len(os.listdir("/proc/self/task")),
        "rss_kib": rss,
    }


def fresh_bootstrap(base: object, timeout_ms: int | None = None) -> object:
    """A new bootstrap for the job, its id sent over ``base``: what a communicator may abort. Its timeout is
    ``base``'s unless given."""
    if base.rank == 0:
        uid = _native.UniqueId.create("127.0.0.1")
        for peer in range(1, base.world_size):
            base.send(peer, 77, uid.to_bytes())
    else:
        uid = _native.UniqueId.from_bytes(base.recv(0, 77))
    return _native.Bootstrap(base.rank, base.world_size, uid, timeout_ms=timeout_ms or base.timeout_ms)


def abort() -> None:
    """Rank 0: a call in flight that rank 1 never joins is aborted from another thread; then a call that
    failed on a dead peer leaves a communicator that refuses calls until aborted, and abort with a dead peer
    is quick.
    Resources before and after are compared."""
    base = _native.Bootstrap.from_environment()
    rank = base.rank
    data = np.ones(2048, np.float32)
    for _ in range(2):  # first use: plans loaded, caches warm
        bootstrap = fresh_bootstrap(base)
        warm = loom.Communicator(bootstrap, host_only=True)
        warm.all_reduce(data)
        warm.abort()
        bootstrap.close()
        del warm
    gc.collect()
    before = resources()
    bootstrap = fresh_bootstrap(base)
    comm = loom.Communicator(bootstrap, host_only=True)
    comm.all_reduce(data)
    if rank == 1:
        base.barrier()  # rank 0 has aborted its communicator
        comm.abort()
        comm = loom.Communicator(fresh_bootstrap(base), host_only=True)
        comm.all_reduce(data)
        base.barrier()  # rank 0's second call waits for this rank now: go away
        os._exit(0)
    errors: list[str] = []

    def in_flight() -> None:
        try:
            comm.all_reduce(data)
        except loom.LoomError as error:
            errors.append(str(error))

    thread = threading.Thread(target=in_flight)
    thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    ended = comm.abort(wait_s=3.0)
    in_flight_abort_s = time.monotonic() - started
    thread.join(5)
    bootstrap.close()
    del comm, bootstrap
    gc.collect()
    after = resources()
    base.barrier()
    comm = loom.Communicator(fresh_bootstrap(base), host_only=True)
    comm.all_reduce(data)
    base.barrier()
    try:
        comm.all_reduce(data)  # rank 1 is gone: ends when that is seen, well before the timeout
        failed_call = ""
    except loom.LoomError as error:
        failed_call = f"{type(error).__name__}: {error}"
    try:
        comm.all_reduce(data)
        refused = ""
    except loom.LoomError as error:
        refused = str(error)
    started = time.monotonic()
    comm.abort(wait_s=3.0)
    dead_peer_abort_s = time.monotonic() - started
    report(
        rank=rank,
        in_flight_abort_s=in_flight_abort_s,
        in_flight_ended=ended,
        in_flight_error=errors[0] if errors else "",
        before=before,
        after=after,
        failed_call=failed_call,
        refused=refused,
        dead_peer_abort_s=dead_peer_abort_s,
    )


def announced_abort(aborter: int, where: str) -> None:
    """All-reduce in a loop; ``aborter`` stops calling and aborts its communicator while the others are
    inside a call (it stays alive afterwards, so its process and connections are not what goes). ``where`` as
    in kill(): "packets" (LL calls) or "exchange" (large calls that meet on the host board). The others
    report their error, when it came and what comm.error() said."""
    comm = loom.Communicator(host_only=True)
    data = np.ones(1024 if where == "packets" else 2 << 20, np.float32)
    comm.all_reduce(data)
    comm.bootstrap.barrier()
    if comm.rank == aborter:
        time.sleep(0.3)  # the others are waiting for this rank inside a call
        aborted_at = time.time()
        comm.abort(wait_s=1.0)
        report(rank=comm.rank, aborted_at=aborted_at)
        time.sleep(3.0)  # alive while the others fail
        return
    watch = ErrorWatch(comm.error)
    try:
        while True:
            comm.all_reduce(data)
    except loom.LoomError as error:
        failed_at = time.time()
        watch.stop()
        report(rank=comm.rank, failed_at=failed_at, message=str(error), watched=watch.message)
    comm.abort(wait_s=1.0)


def link_loss(mode: str) -> None:
    """Ranks on hosts joined by a link that the test cuts (tests/multihost): "calls": all-reduces in a loop until
    one fails (a watchdog thread asks comm.error() meanwhile), then abort(1.0) is timed; "idle": no call, only
    comm.error() every 50 ms until it answers; "flap": all-reduces for 8 s, through a short outage. Each
    reports when and what."""
    comm = loom.Communicator(host_only=True)
    data = np.ones(1 << 16, np.float32)
    comm.all_reduce(data)
    comm.bootstrap.barrier()
    print(f"READY {comm.rank}", flush=True)
    started, calls, error, watched, watched_at, failed_at = time.time(), 0, "", "", None, None
    if mode == "idle":
        while time.time() - started < 25 and watched_at is None:
            found = comm.error()
            if found is not None:
                watched, watched_at = str(found), time.time()
            time.sleep(0.05)
    else:
        watch = ErrorWatch(comm.error)
        try:
            while True:
                # Element 0 says whether this rank's time is up: the sum stops every rank after the same call.
                fresh = np.full(1 << 16, calls % 7, np.float32)
                fresh[0] = time.time() - started > (8 if mode == "flap" else 25)
                comm.all_reduce(fresh)
                assert np.all(fresh[1:] == comm.world_size * (calls % 7)), calls
                calls += 1
                if fresh[0] > 0:
                    break
        except loom.LoomError as failure:
            failed_at, error = time.time(), f"{type(failure).__name__}: {failure}"
        watch.stop()
        watched, watched_at = watch.message or "", watch.at
    aborting = time.monotonic()
    comm.abort(wait_s=1.0)
    report(
        rank=comm.rank,
        calls=calls,
        failed_at=failed_at,
        error=error,
        watched=watched,
        watched_at=watched_at,
        abort_s=time.monotonic() - aborting,
    )


def disagree(kind: str) -> None:
    """The ranks make different calls; every rank must raise, none may hang."""
    comm = loom.Communicator(host_only=True)
    rank = comm.rank
    base = np.ones(1024, np.float32)
    comm.all_reduce(base.copy())  # the first call agrees: the plans are set up
    started = time.monotonic()
    try:
        if kind == "collective":
            if rank == 0:
                comm.all_reduce(base.copy())
            else:
                comm.all_gather(np.empty(1024 * comm.world_size, np.float32), base)
        elif kind == "size":
            comm.all_reduce(np.ones(1024 * (rank + 2), np.float32))
        elif kind == "dtype":
            comm.all_reduce(np.ones(1024, np.float32 if rank == 0 else np.int32))
        elif kind == "plan":
            name = "allreduce_allpairs_packet" if rank == 0 else "allreduce_rs_ag"
            plan = _native.Plan.parse(compile_algorithm(name, comm.world_size, verify=False, min_message_size=0))
            comm.executor.execute(plan, base.copy(), np.empty_like(base))
        elif kind == "large-size":
            comm.all_reduce(np.ones(300_000 + 1024 * rank, np.float32))
        error = ""
    except loom.LoomError as failure:
        error = f"{type(failure).__name__}: {failure}"
    report(rank=rank, error=error, seconds=time.monotonic() - started)
    comm.abort(wait_s=2.0)


def cycles(count: int) -> None:
    """``count`` create/call/destroy cycles of a communicator on one bootstrap; resource growth reported."""
    bootstrap = _native.Bootstrap.from_environment()
    small, large = np.ones(1024, np.float32), np.ones(200_000, np.float32)

    def cycle(staged: bool) -> None:
        comm = loom.Communicator(bootstrap, host_only=True)
        comm.all_reduce(small)  # LL plan: scratch only
        if staged:
            comm.all_reduce(large)  # writes into the peer's buffers: staged through shared memory
        del comm
        gc.collect()

    for _ in range(5):
        cycle(staged=True)
    before = resources()
    started = time.monotonic()
    for index in range(count):
        cycle(staged=index % 10 == 0)  # the staged call costs most; every tenth cycle makes one
    seconds = time.monotonic() - started
    after = resources()
    growth = {key: after[key] - before[key] for key in before}
    report(rank=bootstrap.rank, cycles=count, seconds=seconds, before=before, after=after, growth=growth)


def recover(count: int) -> None:
    """Two survivors, ``count`` cycles: a third process (a new victim each cycle) joins a new 3-rank
    communicator; all-reduces run until the victim SIGKILLs itself mid-call; each survivor times how soon its
    call fails, aborts, builds a 2-rank communicator with the other survivor (a new bootstrap, as after
    ncclCommShrink or a new unique id) and checks an all-reduce of fresh data against NumPy. Resources are
    compared between the end of the warm-up cycles and the end; the victim alternates between a small call
    (an LL plan: packet reads) and a large one (semaphore waits and the host board)."""
    base = _native.Bootstrap.from_environment()
    rank = base.rank
    warmup = 3
    detections: list[float] = []
    errors: list[str] = []
    before: dict = {}
    checked = 0
    upcoming = start_victim(0) if rank == 0 else None
    for cycle in range(warmup + count):
        if cycle == warmup:
            gc.collect()
            before = resources()
        victim = None
        if rank == 0:
            uid, victim = upcoming
            if cycle + 1 < warmup + count:
                upcoming = start_victim(cycle + 1)  # its start-up overlaps this cycle
            base.send(1, 78, uid.to_bytes())
        else:
            uid = _native.UniqueId.from_bytes(base.recv(0, 78))
        # The first victim may still be starting Python: the join waits longer than the calls' timeouts.
        bootstrap = _native.Bootstrap(rank, 3, uid, timeout_ms=30_000)
        elements, stamp = victim_call(cycle)
        comm = loom.Communicator(bootstrap, host_only=True)
        data = np.ones(elements, np.float32)
        try:
            while True:
                comm.all_reduce(data)
        except loom.LoomError as error:
            failed_at = time.time()
            errors.append(str(error))
        comm.abort(wait_s=2.0)
        bootstrap.close()
        del comm, bootstrap
        if victim is not None:
            victim.wait(timeout=10)
        base.barrier()  # the victim's stamp is written before it dies
        with open(stamp, encoding="utf-8") as killed:
            detections.append(failed_at - float(killed.read()))
        survivors = loom.Communicator(fresh_bootstrap(base), host_only=True)
        fresh = inputs(2, 5000 + cycle)
        mine = fresh[rank].copy()
        survivors.all_reduce(mine)
        assert np.array_equal(mine, fresh[0] + fresh[1]), cycle
        checked += 1
        del survivors
        gc.collect()
    after = resources()
    growth = {key: after[key] - before[key] for key in before}
    report(
        rank=rank,
        cycles=count,
        checked=checked,
        detection_max_s=max(detections[warmup:]),
        detection_median_s=sorted(detections[warmup:])[count // 2],
        last_error=errors[-1],
        named_victim=sum(bool(re.search(r"\branks? [\d, ]*\b2\b", text)) for text in errors),
        before=before,
        after=after,
        growth=growth,
    )


def victim_call(cycle: int) -> tuple[int, str]:
    """The all-reduce size of recover()'s cycle (LL and large in turns) and the file its victim's death time
    goes to."""
    return (1024 if cycle % 2 == 0 else 1 << 19), f"{os.environ['LOOM_TEST_SCRATCH']}/killed_{cycle}"


def start_victim(cycle: int) -> tuple[object, subprocess.Popen]:
    """Rank 0 of recover(): the unique id of the cycle's 3-rank bootstrap and the victim process that joins it."""
    uid = _native.UniqueId.create("127.0.0.1")
    env = {**os.environ, "RANK": "2", "LOCAL_RANK": "2", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "3"}
    elements, stamp = victim_call(cycle)
    command = [sys.executable, __file__, "victim", uid.to_bytes().hex(), str(elements), stamp]
    return uid, subprocess.Popen(command, env=env)


def victim(uid_hex: str, elements: int, stamp: str) -> None:
    """Rank 2 of recover()'s cycle: a few all-reduces, then a SIGKILL of itself from a second thread while
    its main thread is inside a call; the time of death goes to ``stamp`` first."""
    uid = _native.UniqueId.from_bytes(bytes.fromhex(uid_hex))
    # Started a cycle early: it waits for the survivors to finish the cycle before.
    comm = loom.Communicator(_native.Bootstrap(2, 3, uid, timeout_ms=60_000), host_only=True)
    data = np.ones(elements, np.float32)
    comm.all_reduce(data)
    die_soon(0.1, write_stamp(stamp))
    while True:
        comm.all_reduce(data)


def flood() -> None:
    """A plain job: join, all-reduce, done (the test floods the root while it starts)."""
    comm = loom.Communicator(host_only=True)
    data = np.full(4096, comm.rank + 1, np.float32)
    comm.all_reduce(data)
    assert np.all(data == comm.world_size * (comm.world_size + 1) / 2)
    report(rank=comm.rank, ok=True)


def jit_overlapping_groups() -> None:
    """Two 3-rank groups of a 4-rank job that share ranks 1 and 2 (no bundled plan is for 3 ranks): the
    second group's all-reduce finds, in ranks 1 and 2, the plan the first group had compiled, and not in
    rank 3; all three still agree on it (before, ranks 1 and 2 ran it while rank 3 waited for rank 0's text)."""
    comm = loom.Communicator(host_only=True)
    rank = comm.rank
    for members in ([0, 1, 2], [1, 2, 3]):
        group = comm.split(0 if rank in members else None)
        if group is not None:
            data = np.full(1000, rank + 1, np.float32)
            group.all_reduce(data)
            assert np.all(data == sum(member + 1 for member in members)), (members, data[:4])
            group.abort()
    report(rank=rank, ok=True)


def alltoallv() -> None:
    """All-to-all-v through loom.Communicator with seeded random splits (zeros included): peers write into
    each other's outputs, which live in shared memory while the call runs (the staging of private arrays)."""
    comm = loom.Communicator(host_only=True)
    all_to_all_v_calls(comm, 500)
    report(rank=comm.rank, ok=True, checked=3)


def all_to_all_v_calls(comm: object, first_seed: int) -> None:
    """Three all-to-all-v calls of seeded random splits (zeros included), each output checked."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from alltoallv_cases import COLUMNS, expected_output, random_counts, rank_input

    rank, world = comm.rank, comm.world_size
    for seed in range(first_seed, first_seed + 3):
        counts = random_counts(seed, world)
        source = rank_input(seed, rank, counts)
        output = np.zeros((int(counts[:, rank].sum()), COLUMNS), np.float32)
        comm.all_to_all(output, source, output_splits=list(counts[:, rank]), input_splits=list(counts[rank]))
        assert np.array_equal(output, expected_output(seed, rank, counts)), seed


def alltoallv_packet() -> None:
    """All-to-all-v in LL packets (the alltoallv_packet plan, run directly): each rank's packets land in its
    peers' scratch, which is shared memory across the processes, over five calls (both halves reused)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from alltoallv_cases import COLUMNS, expected_output, random_counts, rank_input
    from loom.compiler.driver import compile_algorithm

    comm = loom.Communicator(host_only=True)
    rank, world = comm.rank, comm.world_size
    plan = loom.Plan.parse(compile_algorithm("alltoallv_packet", world))
    row = COLUMNS * 4
    for seed in range(800, 805):
        counts = random_counts(seed, world)
        source = rank_input(seed, rank, counts)
        output = np.zeros((int(counts[:, rank].sum()), COLUMNS), np.float32)

        def entries(rows: np.ndarray) -> list[tuple[int, int]]:
            return [(int(start) * row, int(n) * row) for start, n in zip(np.cumsum(rows) - rows, rows, strict=True)]

        comm.executor.execute_counted(
            plan, source, output, sends=entries(counts[rank]), receives=entries(counts[:, rank])
        )
        assert np.array_equal(output, expected_output(seed, rank, counts)), seed
    report(rank=rank, ok=True, checked=5)


def two_hosts() -> None:
    """Ranks on two hosts (LOOM_TEST_HOST_ID, the first half on one, the rest on the other): all-to-all-v
    with random splits over the two-node plan (port channels across the hosts), then send/recv around the
    ring, whose pairs across the hosts run over port channels too."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ["LOOM_TEST_HOST_ID"] = f"host{rank * 2 // world}"  # before Loom first asks who its host is
    comm = loom.Communicator(host_only=True)
    assert comm.ranks_per_node == world // 2, comm.ranks_per_node
    all_to_all_v_calls(comm, 700)
    after, before = (rank + 1) % world, (rank - 1) % world
    inbox = np.zeros(333, np.float32)
    for turn in (0, 1):  # even ranks send first, odd ranks receive first
        if rank % 2 == turn:
            comm.send(np.full(333, rank, np.float32), after)
        else:
            comm.recv(inbox, before)
    assert np.all(inbox == before), inbox[:4]
    report(rank=rank, ok=True, checked=4)


def main() -> None:
    mode, *args = sys.argv[1:]
    if mode == "collectives":
        collectives()
    elif mode == "kill":
        kill(int(args[0]), args[1] if len(args) > 1 else "packets")
    elif mode == "abort":
        abort()
    elif mode == "link_loss":
        link_loss(args[0])
    elif mode == "announced_abort":
        announced_abort(int(args[0]), args[1])
    elif mode == "disagree":
        disagree(args[0])
    elif mode == "cycles":
        cycles(int(args[0]))
    elif mode == "silent":
        silent()
    elif mode == "stopped":
        stopped(int(args[0]))
    elif mode == "recover":
        recover(int(args[0]))
    elif mode == "victim":
        victim(args[0], int(args[1]), args[2])
    elif mode == "flood":
        flood()
    elif mode == "jit_overlapping_groups":
        jit_overlapping_groups()
    elif mode == "alltoallv":
        alltoallv()
    elif mode == "alltoallv_packet":
        alltoallv_packet()
    elif mode == "two_hosts":
        two_hosts()
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
