"""The shapes and variants the library tests compile, and a cache so each plan compiles once per run."""

from __future__ import annotations

import functools
import json

from loom.algorithms import ALGORITHMS
from loom.compiler.driver import compile_algorithm

SINGLE_NODE = (2, 3, 4, 8)
PER_NODE = (2, 4, 8)  # multi-node: 2 nodes x these
BEYOND_TWO_NODES = ((2, 1), (3, 1), (3, 2))  # and these (nodes, per node), where the algorithm runs them
VARIANTS = ((1, False), (1, True), (2, False))  # (instances, inplace)


def shapes(name: str) -> list[tuple[int, int | None]]:
    """(world_size, ranks_per_node) pairs to test: one node of 2, 3, 4, 8; 2 nodes x 2, 4, 8; 2 nodes x 1,
    3 nodes x 1 and 2."""
    algorithm = ALGORITHMS[name]
    out: list[tuple[int, int | None]] = [(n, None) for n in SINGLE_NODE if n in algorithm.world_sizes]
    out += [(nodes * g, g) for nodes, g in algorithm.multi_node if nodes == 2 and g in PER_NODE]
    out += [(nodes * g, g) for nodes, g in BEYOND_TWO_NODES if (nodes, g) in algorithm.multi_node]
    return out


def shape_id(world_size: int, ranks_per_node: int | None) -> str:
    if ranks_per_node in (None, world_size):
        return f"{world_size}r"
    return f"{world_size // ranks_per_node}x{ranks_per_node}"


def cases() -> list[tuple[str, int, int | None, int, bool]]:
    return [
        (name, world_size, per_node, instances, inplace)
        for name in sorted(ALGORITHMS)
        for world_size, per_node in shapes(name)
        for instances, inplace in VARIANTS
    ]


def case_id(case: tuple) -> str:
    name, world_size, per_node, instances, inplace = case
    return f"{name}-{shape_id(world_size, per_node)}-i{instances}" + ("-inplace" if inplace else "")


def options_for(name: str, world_size: int) -> dict:
    # Broadcast and reduce from the last rank, so that a root-0 assumption anywhere would show.
    return {"root": world_size - 1} if name in ("broadcast", "reduce_read", "reduce_packet") else {}


@functools.cache
def plan_text(name: str, world_size: int, ranks_per_node: int | None, instances: int, inplace: bool) -> str:
    # Unverified: test_library verifies every case itself, over more calls than compile's default.
    return compile_algorithm(
        name,
        world_size,
        ranks_per_node,
        instances=instances,
        inplace=inplace,
        verify=False,
        **options_for(name, world_size),
    )


def plan_dict(*case) -> dict:
    return json.loads(plan_text(*case))


def walk_ops(ops: list[dict]):
    """Every op, pipeline bodies included."""
    for op in ops:
        yield op
        yield from walk_ops(op.get("body", []))
