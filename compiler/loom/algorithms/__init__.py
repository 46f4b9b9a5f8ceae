"""The algorithm library: collective algorithms written in the Loom DSL, and their registry.

Every algorithm is a module with a ``build(world_size, ranks_per_node=None, *, instances=1,
inplace=False, name=None, **options) -> CollectiveProgram`` that records the program; compile it
with ``loom.compiler.emit.emit_plan_text(program)`` or, in one step, ``loom.compiler.driver.compile_algorithm``.
``ALGORITHMS`` maps each name to an :class:`Algorithm` entry (collective, protocol, shapes it
supports, default message-size range, options). docs/algorithms.md has the table.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from loom.errors import InvalidArgumentError

if TYPE_CHECKING:
    from loom.language.program import CollectiveProgram

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

SINGLE_NODE_SIZES = tuple(range(2, 9))  # 2 to 8 GPUs on one node
TWO_NODES = tuple((2, per_node) for per_node in range(2, 9))  # 2 nodes x 2 to 8 GPUs
# Across nodes: 2 and more nodes of 1 to 8 GPUs each, up to MAX_MULTI_NODE_RANKS in all. The algorithms that
# run across nodes take any such shape (peers on other nodes over port channels); the bound keeps their
# plans (a full mesh grows with the square of the world size) small enough to compile on first use.
MAX_MULTI_NODE_RANKS = 32
MULTI_NODE_SHAPES = tuple(
    (nodes, per_node)
    for nodes in range(2, MAX_MULTI_NODE_RANKS + 1)
    for per_node in range(1, 9)
    if nodes * per_node <= MAX_MULTI_NODE_RANKS
)


@dataclass(frozen=True)
class Algorithm:
    """One library algorithm: what it computes, which shapes it supports, its default size range."""

    name: str
    module: str  # loom.algorithms.<module>
    collective: str  # plan-format collective name
    protocol: str  # "simple" or "ll"
    summary: str  # the idea, in one line
    world_sizes: tuple[int, ...] = SINGLE_NODE_SIZES  # supported world sizes with every rank on one node
    multi_node: tuple[tuple[int, int], ...] = ()  # supported (nodes, ranks per node) with nodes > 1
    min_message_bytes: int = 0
    max_message_bytes: int = GiB
    options: dict[str, Any] = field(default_factory=dict)  # algorithm-specific options and their defaults

    def load(self) -> ModuleType:
        return importlib.import_module(f"loom.algorithms.{self.module}")

    def build(self, world_size: int, ranks_per_node: int | None = None, **kwargs: Any) -> CollectiveProgram:
        return self.load().build(world_size, ranks_per_node, **kwargs)

    def shapes(self) -> list[str]:
        """Supported shapes as text: "2".."8" for one node, "2x4" for 2 nodes of 4 GPUs."""
        return [str(n) for n in self.world_sizes] + [f"{nodes}x{per_node}" for nodes, per_node in self.multi_node]

    def check_shape(self, world_size: object, ranks_per_node: object) -> tuple[int, int]:
        """(world_size, ranks_per_node) when the algorithm supports them, else InvalidArgumentError."""
        if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
            raise InvalidArgumentError(f"{self.name}: world_size must be a positive integer, got {world_size!r}")
        per_node = world_size if ranks_per_node is None else ranks_per_node
        if not isinstance(per_node, int) or isinstance(per_node, bool) or per_node < 1 or world_size % per_node != 0:
            raise InvalidArgumentError(
                f"{self.name}: ranks_per_node must be a positive integer that divides world_size {world_size},"
                f" got {ranks_per_node!r}"
            )
        nodes = world_size // per_node
        supported = (nodes == 1 and world_size in self.world_sizes) or (nodes, per_node) in self.multi_node
        if not supported:
            shape = f"world_size {world_size}" if nodes == 1 else f"{nodes} nodes x {per_node} ranks"
            one_node = (
                f"world sizes {_ranges(self.world_sizes)} on one node" if self.world_sizes else "no single-node shapes"
            )
            by_nodes: dict[int, list[int]] = {}
            for count, size in self.multi_node:
                by_nodes.setdefault(count, []).append(size)
            multi = (
                " and ".join(
                    f"{count} nodes x {_ranges(sizes)} ranks (world_size = {count} x ranks_per_node)"
                    for count, sizes in sorted(by_nodes.items())
                )
                if by_nodes
                else "no multi-node shapes"
            )
            if self.multi_node == MULTI_NODE_SHAPES:
                multi = (
                    f"2 or more nodes x 1 to 8 ranks, {MAX_MULTI_NODE_RANKS} ranks at most"
                    " (world_size = nodes x ranks_per_node)"
                )
            raise InvalidArgumentError(f"{self.name} does not support {shape}; it supports {one_node}; and {multi}")
        return world_size, per_node

    def describe(self) -> dict[str, Any]:
        """The entry as plain data (for `loom compile --list` and list_algorithms())."""
        return {
            "name": self.name,
            "collective": self.collective,
            "protocol": self.protocol,
            "summary": self.summary,
            "world_sizes": list(self.world_sizes),
            "multi_node": [list(shape) for shape in self.multi_node],
            "min_message_bytes": self.min_message_bytes,
            "max_message_bytes": self.max_message_bytes,
            "options": dict(self.options),
        }


def _ranges(values) -> str:
    """(2, 3, 4, 8) -> "2 to 4, 8"."""
    parts: list[str] = []
    values = sorted(values)
    start = previous = values[0]
    for value in [*values[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        parts.append(str(start) if start == previous else f"{start} to {previous}")
        if value is not None:
            start = previous = value
    return ", ".join(parts)


_ENTRIES = [
    Algorithm(
        "allreduce_allpairs_packet",
        "allreduce_allpairs_packet",
        "allreduce",
        "ll",
        "one shot: every rank sends its whole input as LL packets to every peer, then reduces locally",
        max_message_bytes=256 * KiB,
    ),
    Algorithm(
        "allreduce_twoshot_packet",
        "allreduce_twoshot_packet",
        "allreduce",
        "ll",
        "LL reduce-scatter (piece r to rank r), reduce, LL all-gather of the reduced piece",
        min_message_bytes=256 * KiB + 1,
        max_message_bytes=MiB,
    ),
    Algorithm(
        "allreduce_rs_ag",
        "allreduce_rs_ag",
        "allreduce",
        "simple",
        "reduce-scatter into peers' scratch, reduce, put the result into every peer's output",
        min_message_bytes=MiB + 1,
        max_message_bytes=64 * MiB,
    ),
    Algorithm(
        "allreduce_rs_ag_pipelined",
        "allreduce_rs_ag_pipelined",
        "allreduce",
        "simple",
        "allreduce_rs_ag repeated over `iterations` slices of the message (a pipeline)",
        min_message_bytes=64 * MiB + 1,
        max_message_bytes=GiB,
        options={"iterations": 4},
    ),
    Algorithm(
        "allreduce_zero_copy",
        "allreduce_zero_copy",
        "allreduce",
        "simple",
        "every rank reads its piece of each peer's input, reduces it and writes the result into its own and"
        " every peer's output: one pass, no scratch",
        min_message_bytes=MiB + 1,
        max_message_bytes=64 * MiB,
    ),
    Algorithm(
        "allreduce_read",
        "allreduce_read",
        "allreduce",
        "simple",
        "reduce-scatter by reading peers' inputs, then all-gather by reading peers' reduced pieces: loads only,"
        " no scratch",
        min_message_bytes=MiB + 1,
    ),
    Algorithm(
        "allreduce_ring",
        "allreduce_ring",
        "allreduce",
        "simple",
        "ring reduce-scatter (each step adds the piece from prev and passes it on), then ring all-gather",
        min_message_bytes=MiB + 1,
    ),
    Algorithm(
        "allreduce_hierarchical",
        "allreduce_hierarchical",
        "allreduce",
        "simple",
        "intra-node reduce-scatter, shard exchange with the twin rank on the other node over a port"
        " channel, intra-node all-gather",
        world_sizes=(),
        multi_node=TWO_NODES,
    ),
    Algorithm(
        "allreduce_hierarchical_packet",
        "allreduce_hierarchical_packet",
        "allreduce",
        "ll",
        "intra-node packets to each shard's owner, the node's sum of the shard to the twin rank on the other node as"
        " packets over a port channel, the sum as packets to every local rank: the link crossed once, no signals",
        world_sizes=(),
        multi_node=tuple((2, per_node) for per_node in range(1, 9)),
        max_message_bytes=64 * KiB,
    ),
    Algorithm(
        "allreduce_hierarchical_rs_ag",
        "allreduce_hierarchical_rs_ag",
        "allreduce",
        "simple",
        "intra-node reduce-scatter, reduce-scatter and all-gather of each shard among its twins on the other"
        " nodes over port channels, intra-node all-gather: any number of nodes, one GPU per node included",
        world_sizes=(),
        multi_node=MULTI_NODE_SHAPES,
    ),
    Algorithm(
        "allgather_fullmesh_packet",
        "allgather_fullmesh_packet",
        "allgather",
        "ll",
        "every rank sends its input as LL packets to every peer's scratch; peers unpack into place",
        multi_node=MULTI_NODE_SHAPES,
        max_message_bytes=MiB,
    ),
    Algorithm(
        "allgather_fullmesh",
        "allgather_fullmesh",
        "allgather",
        "simple",
        "every rank puts its input straight into every peer's output",
        multi_node=MULTI_NODE_SHAPES,
        min_message_bytes=MiB + 1,
    ),
    Algorithm(
        "allgather_ring",
        "allgather_ring",
        "allgather",
        "simple",
        "world_size - 1 ring steps: forward the piece received last step to the next rank",
        multi_node=MULTI_NODE_SHAPES,
        min_message_bytes=MiB + 1,
    ),
    Algorithm(
        "allgather_ring_port",
        "allgather_ring_port",
        "allgather",
        "simple",
        "allgather_ring over port channels: on one host every step is a copy-engine copy",
        min_message_bytes=MiB + 1,
    ),
    Algorithm(
        "allgather_fanout",
        "allgather_fanout",
        "allgather",
        "simple",
        "every rank reads its input once and stores it into every peer's output: one put with world_size - 1"
        " destinations",
        min_message_bytes=MiB + 1,
    ),
    Algorithm(
        "allgather_read",
        "allgather_read",
        "allgather",
        "simple",
        "every rank reads each peer's input straight into its own output: one step, nothing written to a peer",
        min_message_bytes=MiB + 1,
    ),
    Algorithm(
        "reducescatter_fullmesh",
        "reducescatter_fullmesh",
        "reducescatter",
        "simple",
        "every rank puts piece p of its input into rank p's scratch; each reduces its own piece",
        multi_node=MULTI_NODE_SHAPES,
        min_message_bytes=MiB + 1,
    ),
    Algorithm(
        "reducescatter_read",
        "reducescatter_read",
        "reducescatter",
        "simple",
        "every rank reads its piece of each peer's input and reduces it into its output: one pass, no scratch",
        min_message_bytes=MiB + 1,
    ),
    Algorithm(
        "reducescatter_fullmesh_packet",
        "reducescatter_fullmesh_packet",
        "reducescatter",
        "ll",
        "as reducescatter_fullmesh with LL packets: no signal/wait, the reduction polls the packets",
        multi_node=MULTI_NODE_SHAPES,
        max_message_bytes=MiB,
    ),
    Algorithm(
        "alltoall_fullmesh",
        "alltoall_fullmesh",
        "alltoall",
        "simple",
        "every rank puts piece p of its input into rank p's output (through scratch when in place)",
        multi_node=MULTI_NODE_SHAPES,
    ),
    Algorithm(
        "alltoall_read",
        "alltoall_read",
        "alltoall",
        "simple",
        "every rank reads its piece of each peer's input into its output (through scratch when in place)",
        min_message_bytes=MiB + 1,
    ),
    Algorithm(
        "alltoall_port",
        "alltoall_port",
        "alltoall",
        "simple",
        "the pieces go over port channels (on one host, copy-engine copies), peers_per_step peers at a time:"
        " in the step of k rank r sends to r + k and receives from r - k",
        min_message_bytes=MiB + 1,
        options={"copy_blocks": 8, "peers_per_step": 1},
    ),
    Algorithm(
        "broadcast",
        "broadcast",
        "broadcast",
        "simple",
        "the root puts its input into every peer's output once the peer says it is ready",
        multi_node=MULTI_NODE_SHAPES,
        options={"root": 0},
    ),
    Algorithm(
        "reduce_read",
        "reduce_read",
        "reduce",
        "simple",
        "the root reads every peer's input once the peer says it is ready and reduces it into its own output;"
        " only the root's output is written",
        options={"root": 0},
    ),
    Algorithm(
        "reduce_packet",
        "reduce_packet",
        "reduce",
        "ll",
        "one shot: every peer sends its whole input as LL packets to the root, which reduces them with its own;"
        " only the root's output is written",
        max_message_bytes=256 * KiB,
        options={"root": 0},
    ),
    Algorithm(
        "sendrecv",
        "sendrecv",
        "sendrecv",
        "simple",
        "every rank puts its input into the next rank's output (through scratch when in place)",
        multi_node=MULTI_NODE_SHAPES,
    ),
]

ALGORITHMS: dict[str, Algorithm] = {entry.name: entry for entry in _ENTRIES}

# Plan families sized at call time (issue 39, docs/executor.md "counted plans"): the executor runs them with a
# call table (Executor::executeCounted) rather than a message size, so they stay out of ALGORITHMS, whose every
# entry the fixed-size tests, the tuned tables and the bundled set take. The JIT compiles them per shape
# (loom.compiler.jit_plans.COUNTED_CHOICES).
COUNTED_ALGORITHMS: dict[str, Algorithm] = {
    entry.name: entry
    for entry in (
        Algorithm(
            "alltoallv_fullmesh",
            "alltoallv_fullmesh",
            "alltoallv",
            "simple",
            "every rank publishes its receive entries, then puts its send entry to p into p's output by p's entry",
            multi_node=MULTI_NODE_SHAPES,
        ),
        Algorithm(
            "alltoallv_packet",
            "alltoallv_packet",
            "alltoallv",
            "ll",
            "every rank sends its entry to p as LL packets into its region of p's scratch, in one crossing with no"
            " handshake; p unpacks it into its receive entry",
            max_message_bytes=64 * KiB,
        ),
    )
}


def names() -> list[str]:
    """The library's algorithm names, sorted."""
    return sorted(ALGORITHMS)


def get(name: str) -> Algorithm:
    """The registry entry for ``name``; InvalidArgumentError listing the known names otherwise."""
    try:
        return ALGORITHMS[name] if name in ALGORITHMS else COUNTED_ALGORITHMS[name]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"unknown algorithm {name!r}; the library has: {', '.join(names())}") from None


__all__ = ["ALGORITHMS", "COUNTED_ALGORITHMS", "MAX_MULTI_NODE_RANKS", "MULTI_NODE_SHAPES", "Algorithm", "get", "names"]
