"""``loom tune``: measure this machine, then use what was measured.

    loom tune --host-only --world-size 4 --collectives allreduce --max-bytes 1MiB

For each collective and message size (powers of four from 1 KiB to ``--max-bytes``) it times the candidates:
the bundled table's choice for the size (``loom.compiler.jit_plans.choose``: the rule the bundled plans
follow), the library algorithms that run the shape at several instance counts (each compiled and proven by
the verifier, and only where their thread blocks fit the placement), and the user plans registered in this
process. It keeps the fastest at each size, merges neighbouring sizes with one winner into a row (the
boundary halfway between two measured sizes, in log scale), compiles each row's plan for the row's sizes,
and writes ``<cache root>/tuned/<machine key>.json`` with the plans in ``<cache root>/tuned/<machine key>/``
and a plot beside them. The registry takes that table before the bundled one wherever the machine matches
(executor/include/loom/tuned_table.hpp); ``LOOM_TUNED=0`` ignores it.

Where it runs: ``--host-only`` on the CPU backend (ranks on threads; its times are host costs, for testing
the mechanism); on one GPU, ranks sharing it as threads (kernel costs on one GPU, not NVLink: it says so);
on a host with as many GPUs as ranks, one process per GPU (``loom.launch``). GPU times are CUDA events:
graph replay of ``calls`` back-to-back calls where the GPU allows, eager calls otherwise; the CPU backend's
are the host's clock; every time is the median of several rounds, after a warm-up, and the slowest rank's.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loom.errors import InvalidArgumentError, LoomError

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")
FIRST_BYTES = 1 << 10
# Instance counts tried per algorithm (capped by what fits the placement); the CPU backend runs a thread per
# block, so it tries fewer.
GPU_INSTANCES = (1, 2, 4, 8, 16, 32, 64)
CPU_INSTANCES = (1, 2, 4)
QUICK_INSTANCES = (1, 4)
TABLE_FORMAT = 1


@dataclass(frozen=True)
class Candidate:
    """One plan to time: a library algorithm at an instance count, or a registered user plan."""

    key: str  # "<algorithm>/i<instances>" or "user/<name>"
    origin: str  # "library" or "user"
    algorithm: str | None
    instances: int | None
    text: str  # the plan's JSON (for the whole size range it serves)
    min_bytes: int
    max_bytes: int
    bundled_choice: tuple[int, int] = (0, -1)  # the sizes where it is the bundled table's choice


@dataclass
class TuneResult:
    table: Path
    plot: Path | None
    rows: list[dict]
    measurements: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def sizes_up_to(max_bytes: int, quick: bool) -> list[int]:
    """1 KiB, 4 KiB, 16 KiB, ... up to ``max_bytes`` (powers of 16 with ``quick``)."""
    step = 16 if quick else 4
    sizes, size = [], FIRST_BYTES
    while size <= max_bytes:
        sizes.append(size)
        size *= step
    return sizes


def machine_key(machine: dict) -> str:
    """The table's file name: backend, GPU model and count, ranks and ranks per node."""
    if machine["backend"] == "cpu":
        return f"cpu_w{machine['world_size']}_r{machine['ranks_per_node']}"
    gpu = "".join(c if c.isalnum() else "-" for c in machine["gpu"].lower()).strip("-")
    return f"{gpu}_x{machine['gpus']}_w{machine['world_size']}_r{machine['ranks_per_node']}"


def candidates(
    collective: str,
    world_size: int,
    ranks_per_node: int,
    sizes: list[int],
    max_blocks: int | None,
    instance_counts: Iterable[int],
) -> list[Candidate]:
    """Every candidate for one collective: the library's algorithms for the shape at each instance count whose
    blocks fit (the bundled table's choices among them, marked), and the user plans registered for it."""
    from loom.algorithms import ALGORITHMS
    from loom.algorithms.tuned_sizes import rows_for_shape
    from loom.compiler.jit import jit_compile
    from loom.compiler.jit_plans import choose, thread_blocks
    from loom.native import native_module

    found: dict[str, Candidate] = {}
    largest = max(sizes)
    choices = [choose(collective, world_size, ranks_per_node, size) for size in sizes]
    wanted = {(choice.algorithm, choice.instances) for choice in choices if choice is not None}
    # Each algorithm over its own default sizes and every size a table of the shape gives it (the bundled
    # tables run some below their defaults), up to the largest size tuned.
    spans: dict[str, tuple[int, int]] = {}
    for name, low, high, *_ in rows_for_shape(world_size, ranks_per_node):
        known = spans.get(name, (low, high))
        spans[name] = (min(known[0], low), max(known[1], high))
    for name, algorithm in sorted(ALGORITHMS.items()):
        if algorithm.collective != collective:
            continue
        table_low, table_high = spans.get(name, (algorithm.min_message_bytes, algorithm.max_message_bytes))
        low = min(algorithm.min_message_bytes, table_low)
        high = min(max(algorithm.max_message_bytes, table_high), largest)
        if low > largest:
            continue
        try:
            algorithm.check_shape(world_size, ranks_per_node)
        except InvalidArgumentError:
            continue
        counts = sorted(set(instance_counts) | {count for alg, count in wanted if alg == name})
        for instances in counts:
            spec = {
                "world_size": world_size,
                "ranks_per_node": ranks_per_node,
                "instances": instances,
                "inplace": False,
                "plan_name": f"tune_{name}_{world_size}r_i{instances}",
                "min_message_size": low,
                "max_message_size": high,
            }
            try:
                plan = jit_compile(name, spec)  # proven by the verifier, or refused
            except LoomError:
                continue
            if max_blocks is not None and thread_blocks(plan.text) > max_blocks:
                continue
            key = f"{name}/i{instances}"
            found[key] = Candidate(key, "library", name, instances, plan.text, low, high)
    # The user's plans registered in this process from a file or loom.compile (whose text can go in a table).
    from loom.runtime.registry import registered_text

    for entry in native_module().registry_list():
        text = registered_text(entry.name)
        if entry.source == "user" and entry.collective == collective and entry.world_size == world_size and text:
            key = f"user/{entry.name}"
            found[key] = Candidate(key, "user", None, None, text, entry.min_message_bytes, entry.max_message_bytes)
    return list(found.values())


def bundled_choice(collective: str, world_size: int, ranks_per_node: int, size: int) -> str | None:
    """The candidate key of the bundled table's choice at ``size``, or None."""
    from loom.compiler.jit_plans import choose

    choice = choose(collective, world_size, ranks_per_node, size)
    return None if choice is None else f"{choice.algorithm}/i{choice.instances}"


def rows_from(
    measured: dict[int, dict[str, float]], sizes: list[int], spans: dict[str, tuple[int, int]] | None = None
) -> list[tuple[int, int, str]]:
    """(min bytes, max bytes, winner) rows: the fastest at each size, neighbours with one winner merged, each
    boundary halfway (log scale) between two measured sizes, the first row from 0 and the last to the largest
    size; every row within its winner's own sizes (``spans``), so two winners whose sizes do not meet leave a
    gap that the bundled table serves."""
    spans = spans or {}
    winners = [(size, min(measured[size], key=measured[size].get)) for size in sizes if measured.get(size)]
    rows: list[list] = []
    for size, winner in winners:
        if rows and rows[-1][2] == winner:
            rows[-1][1] = size
            continue
        low = 0
        if rows:
            previous_size = rows[-1][1]
            halfway = int(math.sqrt(previous_size * size))
            # The boundary inside both spans where they allow: the previous row ends at it, this one starts after.
            earliest = max(previous_size, spans.get(winner, (0, 0))[0] - 1)
            latest = min(size - 1, spans.get(rows[-1][2], (0, 1 << 62))[1])
            boundary = min(max(halfway, earliest), latest)
            rows[-1][1] = boundary
            low = boundary + 1
        rows.append([max(low, spans.get(winner, (0, 0))[0]), size, winner])
    return [tuple(row) for row in rows]


def _buffers(collective: str, nbytes: int, world_size: int) -> tuple[int, int]:
    """(input elements, output elements) of float32 for a call of ``nbytes`` per rank."""
    count = nbytes // 4
    if collective == "allgather":
        return count, count * world_size
    if collective == "reducescatter":
        return count, count // world_size
    return count, count


def measure_rank(
    comm: object, plans: dict[str, object], spans: dict[str, tuple[int, int]], collective: str, sizes: list[int],
    calls: int, rounds: int, graphs: bool, progress: Callable[[], None] | None,
) -> dict[str, dict[str, float]]:  # fmt: skip
    """One rank's part: every plan that serves each size, ``calls`` back-to-back calls per round, the median
    round per call in µs; the slowest rank's time (every rank returns the same table)."""
    executor = comm.executor
    on_gpu = executor.on_gpu
    world = comm.world_size
    mine: dict[str, dict[str, float]] = {}
    for size in sizes:
        nbytes = _call_bytes(size, world)
        count_in, count_out = _buffers(collective, nbytes, world)
        source, target = _arrays(on_gpu, count_in, comm.rank), _arrays(on_gpu, count_out, 0)
        for key, plan in plans.items():
            low, high = spans[key]
            if not low <= nbytes <= high:
                continue
            call = lambda plan=plan, source=source, target=target: executor.execute(plan, source, target)  # noqa: E731
            mine.setdefault(str(size), {})[key] = _time_calls(call, on_gpu, calls, rounds, graphs)
            if progress is not None:
                progress()
    everyone = comm.bootstrap.all_gather(json.dumps(mine).encode())
    slowest: dict[str, dict[str, float]] = {}
    for message in everyone:
        for size, times in json.loads(message).items():
            for key, us in times.items():
                slowest.setdefault(size, {})[key] = max(us, slowest.get(size, {}).get(key, 0.0))
    return slowest


def _arrays(on_gpu: bool, count: int, fill: int) -> object:
    if on_gpu:
        import torch

        return torch.full((count,), float(fill), dtype=torch.float32, device="cuda")
    import numpy as np

    return np.full(count, float(fill), np.float32)


def _time_calls(call: Callable[[], None], on_gpu: bool, calls: int, rounds: int, graphs: bool) -> float:
    """µs per call: the median of ``rounds`` rounds of ``calls`` calls, after one warm-up round."""
    if not on_gpu:
        for _ in range(calls):
            call()
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(calls):
                call()
            times.append((time.perf_counter() - started) / calls * 1e6)
        return statistics.median(times)
    import torch

    stream = torch.cuda.current_stream()
    for _ in range(calls):
        call()
    graph = None
    if graphs:
        graph = torch.cuda.CUDAGraph()
        try:
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                for _ in range(calls):
                    call()
            finally:
                graph.capture_end()
        except RuntimeError:
            graph = None  # eager calls instead (a plan the GPU cannot capture)
    times = []
    for _ in range(rounds):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record(stream)
        if graph is not None:
            graph.replay()
        else:
            for _ in range(calls):
                call()
        end.record(stream)
        stream.synchronize()  # this rank's stream only: ranks sharing a GPU wait for each other's kernels
        times.append(begin.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def tune(
    world_size: int,
    *,
    host_only: bool = False,
    collectives: Iterable[str] = COLLECTIVES,
    max_bytes: int = 1 << 30,
    quick: bool = False,
    processes: bool | None = None,
    progress: bool = True,
) -> TuneResult:
    """Measure, pick, write the table and the plot; returns where they are and the rows. ``processes``: ranks
    as processes (``loom.launch``) rather than threads; by default, processes when every rank has a GPU."""
    from loom.native import native_module
    from loom.plan.cache import cache_root
    from loom.runtime.install_plans import ensure_default_plans_installed
    from loom.tools.select import placement_from_options

    collectives = list(collectives)
    for collective in collectives:
        if collective not in COLLECTIVES:
            raise InvalidArgumentError(f"collectives: {collective!r} is not one of {', '.join(COLLECTIVES)}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise InvalidArgumentError(f"world_size: expected 2 or more ranks, got {world_size!r}")
    if max_bytes < FIRST_BYTES:
        raise InvalidArgumentError(f"max_bytes: expected at least {FIRST_BYTES}, got {max_bytes}")
    notes: list[str] = []
    gpus = 0 if host_only else _visible_gpus()
    if not host_only and gpus == 0:
        raise LoomError("tune: no GPU is visible (torch and CUDA are needed); --host-only tunes the CPU backend")
    sharing = not host_only and gpus < world_size
    if sharing and gpus != 1:
        raise LoomError(f"tune: {world_size} ranks on {gpus} GPUs; give each rank a GPU, or run on one GPU")
    if sharing:
        notes.append(
            f"one GPU: {world_size} ranks share it (threads of one process): the times are kernel costs on one GPU,"
            " not NVLink; the table tests the mechanism, its real use is a machine with a GPU per rank"
        )
    elif host_only:
        notes.append("CPU backend: the times are host costs, for testing the mechanism")
    processes = (not host_only and not sharing) if processes is None else processes
    if sharing and processes:
        raise InvalidArgumentError("processes: ranks sharing one GPU must be threads of one process")
    ensure_default_plans_installed()
    native_module().registry_load_default_plans()
    sizes = sizes_up_to(max_bytes, quick)
    instance_counts = QUICK_INSTANCES if quick else CPU_INSTANCES if host_only else GPU_INSTANCES
    calls, rounds = (3, 3) if quick or host_only else (10, 7)
    placement = placement_from_options(host_only, world_size if (sharing or host_only) else 1, None, None)
    max_blocks = None if placement is None else placement[1] // max(placement[0], 1)
    plan = {
        "world_size": world_size,
        "host_only": host_only,
        "sizes": sizes,
        "calls": calls,
        "rounds": rounds,
        "graphs": not host_only,
        "collectives": {},
    }
    total = 0
    for collective in collectives:
        found = candidates(collective, world_size, world_size, sizes, max_blocks, instance_counts)
        plan["collectives"][collective] = [asdict(c) for c in found]
        total += sum(1 for c in found for size in sizes if c.min_bytes <= _call_bytes(size, world_size) <= c.max_bytes)
    if processes:
        measured = _measure_in_processes(plan, total)
    else:
        measured = _measure_on_threads(plan, total, progress)
    return _write(measured["machine"], measured["times"], plan, notes, cache_root())


def _call_bytes(size: int, world_size: int) -> int:
    """A size as a call runs it: whole float32 pieces for every rank (reduce-scatter, all-to-all)."""
    return size // (4 * world_size) * (4 * world_size)


def _visible_gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def measure_plan(comm: object, plan: dict, progress: Callable[[], None] | None = None) -> dict:
    """One rank's part of a tune (threads and processes alike): every collective's candidates timed, the
    slowest rank's times; rank 0's result carries the machine as the executor names it."""
    from loom.native import native_module

    native = native_module()
    times = {}
    for collective, found in plan["collectives"].items():
        plans = {c["key"]: native.Plan.parse(c["text"]) for c in found}
        spans = {c["key"]: (c["min_bytes"], c["max_bytes"]) for c in found}
        times[collective] = measure_rank(
            comm, plans, spans, collective, plan["sizes"], plan["calls"], plan["rounds"], plan["graphs"], progress
        )
    return {"machine": comm.executor.tuned_machine, "times": times}


def _measure_on_threads(plan: dict, total: int, progress: bool) -> dict:
    """Ranks on threads of this process: the CPU backend, or ranks sharing GPU 0."""
    from loom.runtime.communicator import Communicator
    from loom.runtime.host_ranks import run_ranks

    host_only = plan["host_only"]
    if not host_only:
        # Read when CUDA starts (docs/testing.md): each rank's stream a hardware queue, kernels loaded eagerly.
        os.environ.setdefault("LOOM_SHARE_GPU", "1")
        os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
        os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
    bar = _ProgressBar(total) if progress else None

    def body(bootstrap):
        tick = bar.tick if bar is not None and bootstrap.rank == 0 else None
        if host_only:
            return measure_plan(Communicator(bootstrap, host_only=True), plan, tick)
        import torch

        torch.cuda.set_device(0)
        with torch.cuda.stream(torch.cuda.Stream()):  # a stream per rank: they share the GPU
            return measure_plan(Communicator(bootstrap, device=0), plan, tick)

    results = run_ranks(plan["world_size"], None, body, timeout_ms=120_000, join_timeout_s=3600)
    if bar is not None:
        bar.close()
    for rank, result in sorted(results.items()):
        if isinstance(result, BaseException):
            raise LoomError(f"tune: rank {rank} failed: {type(result).__name__}: {result}") from result
    return results[0]


def _measure_in_processes(plan: dict, total: int) -> dict:
    """One process per rank (``loom.launch``), each on its GPU (or the CPU backend): loom.tools.tune_worker."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="loom-tune-") as folder:
        spec, out = Path(folder) / "plan.json", Path(folder) / "measured.json"
        spec.write_text(json.dumps(plan))
        command = [sys.executable, "-m", "loom.launch", "-n", str(plan["world_size"]), "--timeout", "3000"]
        command += ["-m", "loom.tools.tune_worker", str(spec), str(out)]
        print(f"loom tune: {total} timings in {plan['world_size']} processes", file=sys.stderr, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
        if done.returncode != 0 or not out.exists():
            raise LoomError(f"tune: the ranks failed (exit {done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
        return json.loads(out.read_text())


class _ProgressBar:
    def __init__(self, total: int):
        self.total, self.done, self.started = max(total, 1), 0, time.monotonic()

    def tick(self) -> None:
        self.done += 1
        width = 30
        filled = int(width * self.done / self.total)
        elapsed = time.monotonic() - self.started
        bar = "#" * filled + "." * (width - filled)
        sys.stderr.write(f"\rloom tune [{bar}] {self.done}/{self.total} {elapsed:.0f} s")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


def _write(machine: dict, times_by_collective: dict, plan: dict, notes: list[str], root) -> TuneResult:
    from loom.compiler.jit import jit_compile
    from loom.plan.cache import write_atomically

    sizes = plan["sizes"]
    key = machine_key(machine)
    folder = Path(root) / "tuned"
    plans_folder = folder / key
    plans_folder.mkdir(parents=True, exist_ok=True)
    world, per_node = machine["world_size"], machine["ranks_per_node"]
    rows, measurements, written = [], [], set()
    for collective, found in plan["collectives"].items():
        times = {int(size): t for size, t in times_by_collective[collective].items()}
        by_key = {c["key"]: Candidate(**{**c, "bundled_choice": tuple(c["bundled_choice"])}) for c in found}
        for size in sizes:
            if size in times:
                choice = bundled_choice(collective, world, per_node, size)
                measurements.append(
                    {"collective": collective, "bytes": size, "times_us": times[size], "bundled": choice}
                )
        spans = {key: (c.min_bytes, c.max_bytes) for key, c in by_key.items()}
        for low, high, winner in rows_from(times, sizes, spans):
            candidate = by_key[winner]
            texts = [candidate.text]
            if candidate.origin == "library":
                # Out of place as timed, and in place too (the same schedule on one buffer): a job's calls are
                # often in place, and the row must serve them as well. Each compile proves the plan again.
                texts = []
                for inplace in (False, True):
                    name = f"tuned_{candidate.algorithm}_{world}r_i{candidate.instances}_{low}_{high}"
                    spec = {
                        "world_size": world,
                        "ranks_per_node": per_node,
                        "instances": candidate.instances,
                        "inplace": inplace,
                        "plan_name": name + ("_inplace" if inplace else ""),
                        "min_message_size": low,
                        "max_message_size": high,
                    }
                    texts.append(jit_compile(candidate.algorithm, spec).text)
            for text in texts:
                file = f"{json.loads(text)['name']}.json"
                if file not in written:
                    write_atomically(plans_folder / file, text)
                    written.add(file)
                row = {"collective": collective, "min_bytes": low, "max_bytes": high, "plan": file, "winner": winner}
                rows.append(row)
    # Plans of an earlier tune of this machine that no row names any more go.
    for stale in plans_folder.glob("*.json"):
        if stale.name not in written and stale.is_file() and not stale.is_symlink():
            stale.unlink()
    from loom.version import __version__

    table = {
        "format": TABLE_FORMAT,
        "key": key,
        "machine": machine,
        "rows": rows,
        "measurements": measurements,
        "loom": __version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "notes": notes,
    }
    path = folder / f"{key}.json"
    write_atomically(path, json.dumps(table, indent=1) + "\n")
    plot = _plot(table, folder / f"{key}.png")
    return TuneResult(path, plot, rows, measurements, notes)


def _plot(table: dict, path: Path) -> Path | None:
    """Per collective, the chosen plan's time per size beside the bundled choice's; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    collectives = sorted({m["collective"] for m in table["measurements"]})
    figure, axes = plt.subplots(1, len(collectives), figsize=(5 * len(collectives), 4), squeeze=False)
    for axis, collective in zip(axes[0], collectives, strict=True):
        rows = [m for m in table["measurements"] if m["collective"] == collective]
        sizes = [m["bytes"] for m in rows]
        best = [min(m["times_us"].values()) for m in rows]
        bundled = [m["times_us"].get(m["bundled"], math.nan) if m["bundled"] else math.nan for m in rows]
        axis.plot(sizes, best, "o-", label="tuned (fastest)")
        axis.plot(sizes, bundled, "s--", label="bundled table's choice")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("bytes per rank")
        axis.set_ylabel("µs per call")
        axis.set_title(collective)
        axis.legend()
    machine = table["machine"]
    where = machine["gpu"] or "CPU backend"
    figure.suptitle(f"loom tune: {where}, {machine['world_size']} ranks, {table['date']}")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def format_result(result: TuneResult) -> str:
    lines = [f"table:   {result.table}", f"plot:    {result.plot or '(matplotlib is not installed)'}"]
    lines += [f"note:    {note}" for note in result.notes]
    shown = set()
    for row in result.rows:  # a range's out-of-place and in-place plans: one line
        line = f"  {row['collective']:14} {row['min_bytes']:>12} .. {row['max_bytes']:<12} {row['winner']}"
        if line not in shown:
            shown.add(line)
            lines.append(line)
    return "\n".join(lines)


__all__ = ["COLLECTIVES", "Candidate", "TuneResult", "candidates", "format_result", "machine_key", "rows_from", "tune"]
