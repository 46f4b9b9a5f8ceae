"""Tune the size table of one world size from measurements: which algorithm, instance count and block size
to run at which message size (loom.algorithms.tuned_sizes). Three steps, the middle one on the GPUs:

    python bench/tune_plans.py candidates --world-size 4 --out build/candidates
    python -m loom.launch -n 4 bench/collective_bench.py --plans build/candidates --every-plan --out cand.json
    python bench/tune_plans.py pick cand.json --write     # the fastest candidate per size, as size ranges
    python bench/tune_plans.py report cand.json           # that run as a markdown table beside NCCL
    python bench/tune_plans.py compare before.json after.json   # an A/B of a change, size by size

``candidates`` compiles a grid of candidate plans (one node, out of place; each named
``<algorithm>_<n>r_i<instances>_t<threads>``, over the sizes its kind suits). ``pick`` takes the
fastest candidate at each measured size (graph replay; the winner of the size below where it is within
``tie_margin`` of the fastest), merges neighbouring sizes with the same winner
into a range, puts each boundary halfway (in log scale) between two measured sizes, and prints the
rows; ``--write`` stores them, with the device and date, as that world size's table in
compiler/loom/algorithms/tuned_sizes.json, which bench/tuned_plans.py and the bundled default plans
(plans/build_default_plans.py) then use. ``scripts/multi_gpu_run.sh tune`` runs all three.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from loom.algorithms import ALGORITHMS, GiB, KiB, MiB
from loom.algorithms.tuned_sizes import INSTANCE_DIVISORS, TABLE_FILE, Row

# The grid, per algorithm: instance counts for 2 ranks, threads per block, and the message sizes worth
# timing it at. More ranks try those counts and the same divided by INSTANCE_DIVISORS (the untuned
# bundled plans' scaling, which on 4 H200s left the bandwidth plans far too few blocks), up to
# MAX_BLOCKS_PER_RANK thread blocks. The library takes at most 128 instances; on 4 H200s the bandwidth
# plans' best count was the largest tried, 64, so the grid goes on to 128. The port-channel algorithms
# (alltoall_port, allgather_ring_port: copy-engine copies the host proxy issues) are not in it: on 2 H100s
# the ring all-gather over them took twice the SM ring's time at 1 GiB; on 4 H100s the all-to-all's 1 GiB
# time moved by 13 % between two machines, and both need eager module loading (docs/perf/executor.md,
# the eighth run).
GRID: dict[str, tuple[tuple[int, ...], tuple[int, ...], int, int]] = {
    "allreduce_allpairs_packet": ((1, 4, 8, 16), (256, 512), 0, 1 * MiB),
    "allreduce_twoshot_packet": ((8, 16, 32), (512,), 0, 4 * MiB),
    "allreduce_rs_ag": ((16, 32, 48, 64, 96, 128), (512, 1024), 64 * KiB, GiB),
    "allreduce_rs_ag_pipelined": ((32, 48, 64, 96, 128), (512, 1024), 16 * MiB, GiB),
    "allreduce_zero_copy": ((16, 32, 64, 96, 128), (512, 1024), 64 * KiB, GiB),
    # Loads only, and one peer per step (NCCL's ring), from 16 MiB: see allgather_read below.
    "allreduce_read": ((16, 32, 64, 96, 128), (512, 1024), 16 * MiB, GiB),
    "allreduce_ring": ((8, 16, 32, 64, 128), (512, 1024), 16 * MiB, GiB),
    "allgather_fullmesh_packet": ((1, 4, 8, 16), (256, 512), 0, 1 * MiB),
    "allgather_fullmesh": ((8, 16, 32, 40, 64, 96, 128), (512, 1024), 16 * KiB, GiB),
    # The reading, fan-out and ring all-gathers from 16 MiB: on 4 H100s the writing full mesh's bus bandwidth
    # stayed at about 305 GB/s from 64 MiB while NCCL's ring rose to 341 and Loom's reading reduce-scatter
    # kept pace with NCCL's.
    "allgather_read": ((8, 16, 32, 64, 96, 128), (512, 1024), 16 * MiB, GiB),
    "allgather_fanout": ((8, 16, 32, 64, 96, 128), (512, 1024), 16 * MiB, GiB),
    "allgather_ring": ((8, 16, 32, 64, 128), (512, 1024), 16 * MiB, GiB),
    "reducescatter_fullmesh_packet": ((1, 4, 8, 16), (256, 512), 0, 1 * MiB),
    "reducescatter_read": ((8, 16, 32, 48, 64, 96, 128), (512, 1024), 64 * KiB, GiB),
    "reducescatter_fullmesh": ((16, 32, 64, 96, 128), (512, 1024), 64 * KiB, GiB),
    "alltoall_fullmesh": ((1, 4, 8, 16, 32, 64), (512, 1024), 0, GiB),
    "alltoall_read": ((8, 16, 32, 64), (512, 1024), 16 * MiB, GiB),
    # Reduce to root 0: the LL one shot for small messages, the root's reads with more blocks for large ones.
    "reduce_packet": ((1, 4, 8, 16), (256, 512), 0, 1 * MiB),
    "reduce_read": ((4, 8, 16, 32, 64, 128), (512, 1024), 0, GiB),
}
# A plan's blocks must all be resident at once (they wait for each other): the executor runs one per
# multiprocessor and leaves one free (GpuBackend::maxResidentBlocks); an H100 or H200 has 132.
MAX_BLOCKS_PER_RANK = 128


def candidate_grid(world_size: int) -> list[tuple[str, int, int, int, int]]:
    """(algorithm, instances, threads, smallest bytes, largest bytes) of every candidate for one node."""
    divisor = INSTANCE_DIVISORS[world_size]
    grid = []
    for name, (counts, threads, _, _) in GRID.items():
        if world_size not in ALGORITHMS[name].world_sizes:
            continue
        low, high = _size_range(candidate_name(world_size, name, 1, threads[0]))
        for instances in sorted({max(1, count // divisor) for count in counts} | set(counts)):
            for thread_count in threads:
                grid.append((name, instances, thread_count, low, high))
    return grid


def candidate_name(world_size: int, algorithm: str, instances: int, threads: int) -> str:
    return f"{algorithm}_{world_size}r_i{instances}_t{threads}"


def parse_candidate_name(name: str) -> tuple[str, int, int]:
    """(algorithm, instances, threads) of a candidate_name()."""
    head, instances, threads = name.rsplit("_", 2)
    return head.rsplit("_", 1)[0], int(instances[1:]), int(threads[1:])


def _compile(world_size: int, candidate: tuple[str, int, int, int, int]) -> tuple[str, str]:
    from loom.compiler.driver import compile_algorithm

    algorithm, instances, threads, low, high = candidate
    name = candidate_name(world_size, algorithm, instances, threads)
    text = compile_algorithm(
        algorithm,
        world_size,
        instances=instances,
        plan_name=name,
        min_message_size=low,
        max_message_size=high,
        num_threads_per_block=threads,
        verify=False,  # the grid's algorithms are the verified library's; timing checks results against NCCL
    )
    return name, text


def write_candidates(world_size: int, out: Path, jobs: int | None = None) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    grid = candidate_grid(world_size)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        compiled = list(pool.map(_compile, [world_size] * len(grid), grid))
    written = []
    for name, text in compiled:
        blocks = len(json.loads(text)["gpus"][0]["threadblocks"])
        if blocks > MAX_BLOCKS_PER_RANK:
            print(f"{name}: {blocks} thread blocks per rank, more than {MAX_BLOCKS_PER_RANK}; left out")
            continue
        (out / f"{name}.json").write_text(text)
        written.append(name)
    return written


def _boundary(smaller: int, larger: int) -> int:
    """The last byte count of the smaller size's range: halfway between the two sizes in log scale."""
    return int(round(math.sqrt(smaller * larger)))


def _right(row: dict) -> bool:
    """A timed Loom result that equals NCCL's (within float32 rounding)."""
    return "loom_us" in row and row.get("max_relative_difference", 0.0) <= 1e-5


def fastest(rows: list[dict]) -> dict[tuple[str, int], dict]:
    """{(collective, bytes): the fastest candidate's row} of an --every-plan run, wrong results left out."""
    best: dict[tuple[str, int], dict] = {}
    for row in filter(_right, rows):
        key = (row["collective"], row["bytes"])
        if key not in best or row["loom_us"] < best[key]["loom_us"]:
            best[key] = row
    return best


def fastest_candidates(rows: list[dict], count: int) -> list[str]:
    """The plans of the `count` fastest timed rows (of one size: collective_bench.py --refine times them
    again)."""
    ranked = sorted((row for row in rows if "loom_us" in row), key=lambda row: row["loom_us"])
    return [row["plan"] for row in ranked[:count]]


# Candidates within this fraction of the fastest count as tied: a tie goes to the plan that won the size
# below, so noise makes no extra ranges. Graph replay of small messages moves by a few per cent between
# runs; from 32 MiB the repeated replays agree to well under one, and a wide margin there let one winner run
# on through sizes where another was 1.5-2.7 % faster at each step (the 4-rank all-reduce on 4 x H100).
TIE = 0.03
LARGE_TIE = 0.005
LARGE = 32 << 20


def tie_margin(size: int) -> float:
    return LARGE_TIE if size >= LARGE else TIE


def pick(rows: list[dict], world_size: int) -> list[Row]:
    """The table rows (algorithm, smallest bytes, largest bytes, instances, threads) the measurements
    choose: per collective, the fastest candidate at each measured size (or the previous size's winner,
    if tied with it), neighbouring sizes with the same winner merged, ranges covering 0 to 1 GiB.
    Results that differ from NCCL's are never chosen."""
    table: list[Row] = []
    winners = fastest(rows)
    measured = {(row["collective"], row["bytes"], row["plan"]): row for row in rows if _right(row)}
    for collective in sorted({row["collective"] for row in rows}):
        best = {size: row for (name, size), row in winners.items() if name == collective}
        sizes = sorted(best)
        for previous, size in zip(sizes, sizes[1:], strict=False):
            kept = measured.get((collective, size, best[previous]["plan"]))
            if kept and kept["loom_us"] <= best[size]["loom_us"] * (1 + tie_margin(size)):
                best[size] = kept
        if sizes and sizes[-1] < GiB:
            print(f"pick: {collective} was measured up to {sizes[-1]} bytes only", file=sys.stderr)
        runs: list[tuple[str, int, int]] = []  # (plan, first measured size, last measured size)
        for size in sizes:
            plan = best[size]["plan"]
            if runs and runs[-1][0] == plan:
                runs[-1] = (plan, runs[-1][1], size)
            else:
                runs.append((plan, size, size))
        # Where each run ends: halfway to the next, but within both winners' size ranges.
        ends = []
        for (plan, _, last), (following, first, _) in zip(runs, runs[1:], strict=False):
            end = min(_boundary(last, first), _size_range(plan)[1], first - 1)
            ends.append(max(end, last, _size_range(following)[0] - 1))
        for index, (plan, _, _) in enumerate(runs):
            low = 0 if index == 0 else ends[index - 1] + 1
            high = ends[index] if index < len(ends) else GiB
            algorithm, instances, threads = parse_candidate_name(plan)
            table.append((algorithm, low, high, instances, threads))
    return table


def _size_range(plan: str) -> tuple[int, int]:
    """The sizes a candidate was compiled for (candidate_grid): its kind's, which may reach past the
    algorithm's default range (a size range is a plan option, not a limit of the algorithm)."""
    _, _, low, high = GRID[parse_candidate_name(plan)[0]]
    return low, high


def write_table(world_size: int, table: list[Row], meta: dict, path: Path = TABLE_FILE) -> None:
    tables = json.loads(path.read_text()) if path.exists() else {}
    tables[str(world_size)] = {
        "device": meta.get("device", ""),
        "nccl": meta.get("nccl", ""),
        "date": meta.get("date", ""),
        "fast_path": meta.get("fast_path", ""),
        "rows": [list(row) for row in table],
    }
    path.write_text(json.dumps(dict(sorted(tables.items(), key=lambda item: int(item[0]))), indent=1) + "\n")


def _size_text(size: int) -> str:
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if size >= unit:
            return f"{size // unit} {name}"
    return f"{size} B"


def report(rows: list[dict]) -> list[str]:
    """A markdown table of an --every-plan run: per collective and size the fastest candidate beside NCCL
    (the tables of docs/perf/executor.md)."""
    lines = [
        "| collective | bytes | NCCL µs | Loom µs | NCCL / Loom | bus GB/s Loom / NCCL | fastest candidate |",
        "|---|---|---|---|---|---|---|",
    ]
    for (collective, size), row in sorted(fastest(rows).items()):
        algorithm, instances, threads = parse_candidate_name(row["plan"])
        lines.append(
            f"| {collective} | {_size_text(size)} | {row['nccl_us']:.2f} | {row['loom_us']:.2f} |"
            f" {row['nccl_us'] / row['loom_us']:.2f} | {row['loom_busbw_gbs']:.0f} / {row['nccl_busbw_gbs']:.0f} |"
            f" `{algorithm} i{instances} t{threads}` |"
        )
    return lines


def compare(before: list[dict], after: list[dict]) -> list[str]:
    """Two --every-plan runs (an A/B of a change, on one machine): per size the fastest candidate of each,
    each against the NCCL of its own run, and the time after over before."""
    lines = [
        "| collective | bytes | before µs (NCCL / Loom) | after µs (NCCL / Loom) | after / before |",
        "|---|---|---|---|---|",
    ]
    first, second = fastest(before), fastest(after)
    for key in sorted(first.keys() & second.keys()):
        a, b = first[key], second[key]
        lines.append(
            f"| {key[0]} | {_size_text(key[1])} | {a['loom_us']:.2f} ({a['nccl_us'] / a['loom_us']:.2f}) |"
            f" {b['loom_us']:.2f} ({b['nccl_us'] / b['loom_us']:.2f}) | {b['loom_us'] / a['loom_us']:.2f} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    candidates = commands.add_parser("candidates", help="compile the candidate plans of one world size")
    candidates.add_argument("--world-size", type=int, required=True)
    candidates.add_argument("--out", type=Path, required=True)
    chooser = commands.add_parser("pick", help="the table a collective_bench.py --every-plan run chooses")
    chooser.add_argument("results", type=Path)
    chooser.add_argument("--write", action="store_true", help="store it in " + str(TABLE_FILE))
    reporter = commands.add_parser("report", help="a markdown table: the fastest candidate per size beside NCCL")
    reporter.add_argument("results", type=Path)
    comparer = commands.add_parser("compare", help="a markdown table: two runs' fastest candidates per size")
    comparer.add_argument("before", type=Path)
    comparer.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "candidates":
        names = write_candidates(args.world_size, args.out)
        print(f"{len(names)} candidates in {args.out}")
        return 0
    if args.command == "report":
        print("\n".join(report(json.loads(args.results.read_text())["rows"])))
        return 0
    if args.command == "compare":
        before, after = (json.loads(path.read_text())["rows"] for path in (args.before, args.after))
        print("\n".join(compare(before, after)))
        return 0
    data = json.loads(args.results.read_text())
    if data["meta"].get("mode", "graph") != "graph":
        print("pick: the table is chosen from graph-replay times (collective_bench.py --mode graph)", file=sys.stderr)
        return 2
    world_size = data["meta"]["world_size"]
    table = pick(data["rows"], world_size)
    for row in table:
        print(json.dumps(list(row)))
    if args.write:
        write_table(world_size, table, data["meta"])
        print(f"wrote the {world_size}-rank table to {TABLE_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
