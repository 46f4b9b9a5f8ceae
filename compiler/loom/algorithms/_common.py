"""What the algorithm modules share: argument checks, program parameters, channels by node.

The modules record their ops themselves (so that every op's ``loc`` names the algorithm's own
line and the plan's source hash covers the algorithm's source); this module only checks arguments,
fills in the CollectiveProgram parameters and creates channels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loom.errors import InvalidArgumentError
from loom.language.channel import MemoryChannel, PortChannel

if TYPE_CHECKING:
    from loom.algorithms import Algorithm
    from loom.language.program import CollectiveProgram

# Options every algorithm accepts, with their meaning (defaults come from the registry entry).
COMMON_OPTIONS = {
    "min_message_size": "smallest message (bytes of one rank's input) the plan is registered for",
    "max_message_size": "largest message the plan is registered for (scratch is sized for it)",
    "num_threads_per_block": "CUDA threads per thread block, a multiple of 32 from 32 to 1024",
}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class Setup:
    """The checked arguments of one ``build()`` call."""

    algorithm: Algorithm
    world_size: int
    ranks_per_node: int
    instances: int
    inplace: bool
    name: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def nodes(self) -> int:
        return self.world_size // self.ranks_per_node

    def node(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def same_node(self, a: int, b: int) -> bool:
        return self.node(a) == self.node(b)

    def program_args(self) -> dict[str, Any]:
        """Keyword arguments for CollectiveProgram(name, collective, world_size, **these)."""
        return {
            "instances": self.instances,
            "protocol": "LL" if self.algorithm.protocol == "ll" else "Simple",
            "num_threads_per_block": self.options["num_threads_per_block"],
            "min_message_size": self.options["min_message_size"],
            "max_message_size": self.options["max_message_size"],
            "ranks_per_node": self.ranks_per_node,
        }

    def annotate(self, program: CollectiveProgram) -> None:
        """Record the algorithm and its options in the plan parameters (and so in the source hash)."""
        program.parameters["algorithm"] = self.algorithm.name
        program.parameters["options"] = dict(sorted(self.options.items()))


def setup(
    algorithm_name: str,
    world_size: object,
    ranks_per_node: object,
    instances: object,
    inplace: object,
    name: object,
    options: dict[str, Any],
) -> Setup:
    """Check a build() call against the algorithm's registry entry; InvalidArgumentError names the bad argument."""
    from loom.algorithms import get

    algorithm = get(algorithm_name)
    world, per_node = algorithm.check_shape(world_size, ranks_per_node)
    if not _is_int(instances) or not 1 <= instances <= 128:
        raise InvalidArgumentError(f"{algorithm.name}: instances must be an integer from 1 to 128, got {instances!r}")
    if not isinstance(inplace, bool):
        raise InvalidArgumentError(f"{algorithm.name}: inplace must be True or False, got {inplace!r}")
    if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 256):
        raise InvalidArgumentError(f"{algorithm.name}: name must be a non-empty string of at most 256 characters")
    defaults: dict[str, Any] = {
        "min_message_size": algorithm.min_message_bytes,
        "max_message_size": algorithm.max_message_bytes,
        "num_threads_per_block": 1024,
    }
    defaults.update(algorithm.options)  # the algorithm's own options, with the defaults its registry entry gives
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise InvalidArgumentError(
            f"{algorithm.name}: unknown option(s) {', '.join(unknown)}; it accepts {', '.join(sorted(defaults))}"
        )
    merged = {**defaults, **options}
    for key in ("min_message_size", "max_message_size"):
        if not _is_int(merged[key]) or merged[key] < 0:
            raise InvalidArgumentError(f"{algorithm.name}: {key} must be a non-negative integer, got {merged[key]!r}")
    if merged["min_message_size"] > merged["max_message_size"]:
        raise InvalidArgumentError(
            f"{algorithm.name}: min_message_size {merged['min_message_size']} is larger than"
            f" max_message_size {merged['max_message_size']}"
        )
    threads = merged["num_threads_per_block"]
    if not _is_int(threads) or not 32 <= threads <= 1024 or threads % 32:
        raise InvalidArgumentError(
            f"{algorithm.name}: num_threads_per_block must be a multiple of 32 from 32 to 1024, got {threads!r}"
        )
    if name is None:
        shape = f"{world}r" if per_node == world else f"{world // per_node}x{per_node}"
        name = f"{algorithm.name}_{shape}" + (f"_i{instances}" if instances > 1 else "")
        name += "_inplace" if inplace else ""
    return Setup(algorithm, world, per_node, instances, inplace, name, merged)


def check_int_option(setup_: Setup, key: str, low: int, high: int) -> int:
    value = setup_.options[key]
    if not _is_int(value) or not low <= value <= high:
        raise InvalidArgumentError(
            f"{setup_.algorithm.name}: option {key} must be an integer from {low} to {high}, got {value!r}"
        )
    return value


def peer_channel(setup_: Setup, dst_rank: int, src_rank: int) -> MemoryChannel | PortChannel:
    """A memory channel to a peer on the same node, a port channel to one on another node."""
    if setup_.same_node(dst_rank, src_rank):
        return MemoryChannel(dst_rank, src_rank)
    return PortChannel(dst_rank, src_rank)


def full_mesh(setup_: Setup) -> dict[tuple[int, int], MemoryChannel | PortChannel]:
    """One channel per ordered pair of ranks, keyed (src, dst): memory within a node, port across.

    One channel per pair and direction keeps the pairing of the two ends obvious: rank a's only
    channel to b pairs with b's only channel to a.
    """
    n = setup_.world_size
    return {(src, dst): peer_channel(setup_, dst, src) for src in range(n) for dst in range(n) if src != dst}


def ring(setup_: Setup, port_within_node: bool = False) -> dict[tuple[int, int], MemoryChannel | PortChannel]:
    """A channel from every rank to its next and previous rank, keyed (src, dst): memory within a node, port
    across, or port everywhere with ``port_within_node`` (copy-engine copies). With 2 ranks next and prev are
    one rank, so one channel serves both directions of the ring."""
    n = setup_.world_size
    channels: dict[tuple[int, int], MemoryChannel | PortChannel] = {}
    for src in range(n):
        for dst in sorted({(src + 1) % n, (src - 1) % n}):
            channels[(src, dst)] = PortChannel(dst, src) if port_within_node else peer_channel(setup_, dst, src)
    return channels


@dataclass
class TwoNodeChannels:
    """The channels of a two-node hierarchical algorithm: each rank's local peers, a memory channel to each, and
    a port channel to its twin (the same local index on the other node)."""

    local: dict[int, list[int]]
    memory: dict[tuple[int, int], MemoryChannel]
    port: dict[int, PortChannel]


def two_node_channels(setup_: Setup) -> TwoNodeChannels:
    """Declared in this order, memory channels first, on every rank (channels pair by declaration order)."""
    n, g = setup_.world_size, setup_.ranks_per_node
    local = {r: [r - r % g + q for q in range(g) if r - r % g + q != r] for r in range(n)}
    memory = {(r, p): MemoryChannel(p, r) for r in range(n) for p in local[r]}
    port = {r: PortChannel((r + g) % n, r) for r in range(n)}
    return TwoNodeChannels(local, memory, port)


def peers(rank: int, world_size: int) -> list[int]:
    """The other ranks, starting after ``rank`` and wrapping, so that ranks start on different peers."""
    return [(rank + step) % world_size for step in range(1, world_size)]


def slot(receiver: int, sender: int) -> int:
    """Where a receiver keeps a sender's piece among its world_size - 1 per-peer scratch slots."""
    return sender if sender < receiver else sender - 1
