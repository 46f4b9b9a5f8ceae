"""Plans for shapes with no bundled plan (3, 5, 6, 7, 12 ranks, ...), compiled on first use.

    found = plan_for_call("allreduce", world_size=3, ranks_per_node=3, message_bytes=262144, inplace=False)
    found.path   # <cache root>/jit/<key>.json, compiled and verified once, read back from then on

The algorithm, instances and size range come from the rule the bundled set follows
(:func:`loom.algorithms.tuned_sizes.rows_for_shape`: the tuned table of the world size, else the 2-rank
one with scaled instances; across nodes the hierarchical table; one plan for the whole range of
broadcast, send/recv and reduce): the plan serves the whole size range of its row, so one compile serves
many sizes. :func:`loom.compiler.jit.jit_compile` compiles it (with the
symbolic verifier) and caches it by content hash. ``loom.Communicator`` and ``libloom_nccl.so`` (through
``loom jit-plan``) call it when no registered plan fits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from loom.algorithms import ALGORITHMS, COUNTED_ALGORITHMS
from loom.algorithms.tuned_sizes import rows_for_shape
from loom.compiler.jit import JitPlan, jit_compile
from loom.errors import InvalidArgumentError, LoomError

# What a JIT plan can serve: the library's algorithms reduce with sum.
JIT_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "alltoallv")

# Counted collectives: one plan serves every size of a shape (its entries come with each call, and ranks
# whose entries differ in size must still run the same plan). Thread blocks per rank stay at 8 (instances x
# world size), a first rule, but for two ranks of one node (send/recv in libloom_nccl.so and
# loom.Communicator): 32 instances. bench/p2p_bench.py on 2 x H200 (docs/perf/p2p.md) found them at or below
# NCCL's time from 1 MiB for a lone send and from 32 KiB for an exchange (0.63-0.84x from 256 KiB), where 4
# instances took up to twice NCCL's time from 4 MiB. Fewer instances are up to 1.5 us faster below 32 KiB,
# but ranks whose all-to-all-v entries differ in size must pick the same plan, so one serves every size.
# More blocks on larger worlds would not stay resident with 8 ranks sharing one GPU.
COUNTED_CHOICES = {"alltoallv": "alltoallv_fullmesh"}
COUNTED_BLOCKS_PER_RANK = 8
COUNTED_PAIR_INSTANCES = 32


@dataclass(frozen=True)
class JitChoice:
    algorithm: str
    min_bytes: int
    max_bytes: int
    instances: int
    threads: int


def choose(collective: str, world_size: int, ranks_per_node: int, message_bytes: int) -> JitChoice | None:
    """The row of the shape's table that serves the call, or None when none does."""
    if collective not in JIT_COLLECTIVES or world_size < 2 or ranks_per_node < 1 or world_size % ranks_per_node:
        return None
    if collective in COUNTED_CHOICES:
        name = COUNTED_CHOICES[collective]
        algorithm = COUNTED_ALGORITHMS[name]
        if not _runs_on(name, world_size, ranks_per_node):
            return None
        pair = world_size == 2 and ranks_per_node == 2
        instances = COUNTED_PAIR_INSTANCES if pair else max(1, COUNTED_BLOCKS_PER_RANK // world_size)
        return JitChoice(name, algorithm.min_message_bytes, algorithm.max_message_bytes, instances, 1024)
    for name, low, high, instances, threads in rows_for_shape(world_size, ranks_per_node):
        if (
            ALGORITHMS[name].collective == collective
            and low <= message_bytes <= high
            and _runs_on(name, world_size, ranks_per_node)
        ):
            return JitChoice(name, low, high, instances, threads)
    return None


def _runs_on(algorithm: str, world_size: int, ranks_per_node: int) -> bool:
    try:
        (ALGORITHMS.get(algorithm) or COUNTED_ALGORITHMS[algorithm]).check_shape(world_size, ranks_per_node)
    except InvalidArgumentError:
        return False
    return True


def plan_for_call(
    collective: str,
    *,
    world_size: int,
    ranks_per_node: int,
    message_bytes: int,
    inplace: bool,
    root: int | None = None,
    max_thread_blocks: int | None = None,
) -> JitPlan:
    """Compile (or read back from the cache) the plan that serves the call; a LoomError naming the
    collective, the shape and the algorithm when there is none or it does not compile or verify.

    ``max_thread_blocks`` is the most thread blocks a rank's plan may have where it runs (the placement:
    ranks sharing a GPU, the GPU's multiprocessors). Where the table's choice has more, the algorithm is
    compiled with fewer instances, named with ``_i<instances>``; a LoomError says why when even one
    instance does not fit."""
    if max_thread_blocks is not None and (isinstance(max_thread_blocks, bool) or max_thread_blocks < 1):
        raise InvalidArgumentError(f"max_thread_blocks: expected a positive integer or None, got {max_thread_blocks!r}")
    choice = choose(collective, world_size, ranks_per_node, message_bytes)
    shape = f"{world_size} ranks, {ranks_per_node} per node"
    if choice is None:
        raise LoomError(
            f"no library algorithm serves {collective} of {message_bytes} bytes over {shape} (they run 2 to 8 ranks"
            " on one node, and 2 or more nodes of 1 to 8 ranks, 32 in all: loom compile --list)"
        )
    nodes = world_size // ranks_per_node
    name = f"{choice.algorithm}_{world_size}r" if nodes == 1 else f"{choice.algorithm}_{nodes}x{ranks_per_node}"
    name += f"_{choice.min_bytes}_{choice.max_bytes}" + ("_inplace" if inplace else "")
    spec = {
        "world_size": world_size,
        "ranks_per_node": ranks_per_node,
        "instances": choice.instances,
        "inplace": inplace,
        "plan_name": name,
        "min_message_size": choice.min_bytes,
        "max_message_size": choice.max_bytes,
        "num_threads_per_block": choice.threads,
    }
    if collective in ("broadcast", "reduce"):
        spec["root"] = root or 0
        spec["plan_name"] = f"{name}_root{spec['root']}"
    full_name = spec["plan_name"]
    try:
        found = jit_compile(choice.algorithm, spec)
        blocks = thread_blocks(found.text)
        # Thread blocks grow with instances: scale them down to the limit, then step down while still above it.
        while max_thread_blocks is not None and blocks > max_thread_blocks and spec["instances"] > 1:
            scaled = spec["instances"] * max_thread_blocks // blocks
            instances = max(1, min(scaled, spec["instances"] - 1))
            spec = {**spec, "instances": instances, "plan_name": f"{full_name}_i{instances}"}
            found = jit_compile(choice.algorithm, spec)
            blocks = thread_blocks(found.text)
    except LoomError as error:
        raise LoomError(f"JIT plan for {collective} over {shape} ({choice.algorithm}): {error}") from error
    if max_thread_blocks is not None and blocks > max_thread_blocks:
        raise LoomError(
            f"no plan for {collective} of {message_bytes} bytes over {shape} fits where it runs: {choice.algorithm}"
            f" with {spec['instances']} instance(s) has {blocks} thread blocks per rank, and at most"
            f" {max_thread_blocks} fit"
            " (the GPU's resident blocks shared by the ranks on it)"
        )
    return found


def thread_blocks(plan_text: str) -> int:
    """The most thread blocks any rank of a plan (JSON text) has."""
    return max((len(gpu["threadblocks"]) for gpu in json.loads(plan_text)["gpus"]), default=0)


# The eager send/recv of a pair (docs/executor.md, "small messages without the handshake"): a round whose
# larger message is at most LOOM_P2P_PACKET_BYTES runs alltoallv_packet with that capacity. Off (0) until
# it is timed beside NCCL on two GPUs (docs/perf/p2p.md, the `loom packets` rows).
PACKET_CAPACITY_LIMIT = 1 << 20


def packet_pair_plan(capacity: int) -> JitPlan:
    """The packet plan of two ranks of one node for entries of up to ``capacity`` bytes (compiled once,
    cached by content hash): what a send/recv round of a pair runs when its larger message fits."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or not 0 < capacity <= PACKET_CAPACITY_LIMIT:
        raise InvalidArgumentError(f"packet capacity: expected 1 to {PACKET_CAPACITY_LIMIT} bytes, got {capacity!r}")
    spec = {
        "world_size": 2,
        "ranks_per_node": 2,
        "instances": 1,
        "inplace": False,
        "plan_name": f"alltoallv_packet_2r_0_{capacity}",
        "min_message_size": 0,
        "max_message_size": capacity,
    }
    return jit_compile("alltoallv_packet", spec)


__all__ = [
    "JIT_COLLECTIVES",
    "PACKET_CAPACITY_LIMIT",
    "JitChoice",
    "choose",
    "packet_pair_plan",
    "plan_for_call",
    "thread_blocks",
]
