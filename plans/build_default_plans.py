"""Generate the bundled default plans, plans/default/*.json, from the algorithm library.

    python plans/build_default_plans.py           # (re)write plans/default
    python plans/build_default_plans.py --check   # exit 1, naming the files, if plans/default is stale

The set: one node of 2, 4 and 8 ranks and two nodes of 2, 4 and 8 ranks each, out of place and in
place. All-reduce, all-gather and reduce-scatter get one plan per message-size range of the tuned
table of that world size (loom.algorithms.tuned_sizes; the 2-rank one, scaled, where a world size has
none of its own), and so does all-to-all where the table has rows of it; broadcast (root 0), send/recv,
reduce (root 0, one node) and an all-to-all the table has no rows of get one plan for every size, and so does
all-to-all-v (the JIT's choice, out of place: its sizes come with each call), on these shapes and on two
nodes of one rank (a send/recv pair across nodes). Each plan is verified as it
compiles (compile_algorithm's default). `loom install-plans` (or the first loom.Communicator, or
libloom_nccl.so on first use) installs them gzip-compressed, with an index, into <cache root>/default,
where the executor's plan registry loads them (plans/README.md).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from loom.algorithms.tuned_sizes import rows_for_shape
from loom.compiler.driver import compile_algorithm
from loom.compiler.jit_plans import COUNTED_CHOICES, choose

PLANS_DIR = Path(__file__).resolve().parent / "default"

# (world_size, ranks_per_node): one node of 2, 4, 8 ranks; two nodes of 2, 4, 8 ranks each.
SHAPES = [(2, 2), (4, 4), (8, 8), (4, 2), (8, 4), (16, 8)]
# Counted plans take one more: two ranks on two nodes, the link of a send/recv pair across nodes (libloom_nccl).
COUNTED_SHAPES = [*SHAPES, (2, 1)]


@dataclass(frozen=True)
class DefaultPlan:
    """One bundled plan: the algorithm, its shape and size range, and how it is compiled."""

    algorithm: str
    world_size: int
    ranks_per_node: int
    inplace: bool
    min_bytes: int
    max_bytes: int
    instances: int
    threads: int

    @property
    def name(self) -> str:
        """e.g. allreduce_allpairs_packet_2r_0_32768, allgather_fullmesh_2x4_131073_1073741824_inplace."""
        nodes = self.world_size // self.ranks_per_node
        shape = f"{self.world_size}r" if nodes == 1 else f"{nodes}x{self.ranks_per_node}"
        suffix = "_inplace" if self.inplace else ""
        return f"{self.algorithm}_{shape}_{self.min_bytes}_{self.max_bytes}{suffix}"

    @property
    def file_name(self) -> str:
        return f"{self.name}.json"


def default_plans() -> list[DefaultPlan]:
    """Every plan of the bundled set, in a fixed order."""
    plans: list[DefaultPlan] = []
    for world_size, ranks_per_node in SHAPES:
        for name, low, high, instances, threads in rows_for_shape(world_size, ranks_per_node):
            for inplace in (False, True):
                plans.append(DefaultPlan(name, world_size, ranks_per_node, inplace, low, high, instances, threads))
    # Counted plans (all-to-all-v, and send/recv in libloom_nccl.so): the JIT's choice for the shape, out of
    # place only, so that a job needs no Python for them.
    for world_size, ranks_per_node in COUNTED_SHAPES:
        for collective in COUNTED_CHOICES:
            choice = choose(collective, world_size, ranks_per_node, 0)
            if choice is not None:
                plans.append(
                    DefaultPlan(
                        choice.algorithm,
                        world_size,
                        ranks_per_node,
                        False,
                        choice.min_bytes,
                        choice.max_bytes,
                        choice.instances,
                        choice.threads,
                    )
                )
    names = [plan.name for plan in plans]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"default plan names are not unique: {', '.join(duplicates)}")
    return plans


def build_plans(jobs: int | None = None) -> dict[str, str]:
    """{file name: plan JSON text} for every default plan; compiles (and verifies) in ``jobs`` processes."""
    plans = default_plans()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [
            pool.submit(
                compile_algorithm,
                plan.algorithm,
                plan.world_size,
                plan.ranks_per_node,
                instances=plan.instances,
                inplace=plan.inplace,
                plan_name=plan.name,
                min_message_size=plan.min_bytes,
                max_message_size=plan.max_bytes,
                num_threads_per_block=plan.threads,
            )
            for plan in plans
        ]
        return {plan.file_name: future.result() for plan, future in zip(plans, futures, strict=True)}


def check(directory: Path = PLANS_DIR, jobs: int | None = None) -> list[str]:
    """What differs between ``directory`` and a fresh build: one line per stale, missing or extra file."""
    expected = build_plans(jobs)
    present = {path.name for path in directory.glob("*.json")}
    problems = [f"missing: {directory / name}" for name in sorted(set(expected) - present)]
    problems += [f"extra: {directory / name}" for name in sorted(present - set(expected))]
    for name in sorted(set(expected) & present):
        if (directory / name).read_text(encoding="utf-8") != expected[name]:
            problems.append(f"differs: {directory / name}")
    return problems


def write(directory: Path = PLANS_DIR, jobs: int | None = None) -> list[Path]:
    """Rewrite ``directory`` with the default plans, removing *.json files that are no longer in the set."""
    plans = build_plans(jobs)
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.glob("*.json"):
        if path.name not in plans:
            path.unlink()
    written = []
    for name, text in plans.items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the bundled default plans (plans/default/*.json).")
    parser.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    parser.add_argument("--jobs", type=int, help="compiler processes (default: one per CPU)")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(jobs=args.jobs)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print("plans/default is stale: run python plans/build_default_plans.py", file=sys.stderr)
            return 1
        print(f"ok: {PLANS_DIR} matches the {len(default_plans())} default plans")
        return 0
    written = write(jobs=args.jobs)
    size = sum(path.stat().st_size for path in written)
    print(f"wrote {len(written)} plans ({size / 2**20:.1f} MiB) to {PLANS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
