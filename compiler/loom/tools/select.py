"""``loom select``: which plan a call gets, and why, without running it.

    explain("allgather", 16384, world_size=4, placement=(4, 131))
    -> Selection(plan='allgather_fullmesh_4r_16384_23170_i8', source='JIT', ...)

It asks what a ``loom.Communicator`` asks per call: the registry's selector (user plans before bundled ones,
narrowest size range first) among the plans whose thread blocks fit the placement (ranks sharing a GPU,
the blocks the GPU holds at once: ``Executor.placement``), then, where none fits, the library's algorithm
for the shape compiled with as many instances as fit (the JIT, cached like any JIT plan). It says which
of these picked the plan, and which plans it passed over because they do not fit, with the numbers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from loom.errors import InvalidArgumentError, LoomError
from loom.native import native_module

# What a GPU holds at once of the interpreter's 1024-thread blocks: one per multiprocessor, one left free
# (executor/src/gpu_backend.cu, maxResidentBlocks).
NO_LIMIT = 0xFFFFFFFF


@dataclass
class Selection:
    plan: str | None  # the plan's name, or None when nothing runs the call
    source: str  # "user plan", "tuned table", "bundled table", "JIT" or "none"
    placement: tuple[int, int] | None  # (ranks sharing the GPU, resident blocks); None: no limit
    why: str  # one sentence
    passed_over: list[tuple[str, str]] = field(default_factory=list)  # (plan, why it does not fit)
    thread_blocks: int | None = None  # of the chosen plan, per rank at most


def gpu_placement(ranks_per_node: int) -> tuple[int, int] | None:
    """The placement of a rank of this machine: (ranks sharing a GPU, resident blocks) when torch sees GPUs,
    else None. Ranks share a GPU only when the node has more ranks than GPUs (LOOM_SHARE_GPU=1)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return None
    gpus = torch.cuda.device_count()
    multiprocessors = torch.cuda.get_device_properties(0).multi_processor_count
    sharing = max(1, -(-ranks_per_node // gpus))
    return sharing, max(multiprocessors - 1, 1)


def explain(
    collective: str,
    message_bytes: int,
    *,
    world_size: int,
    ranks_per_node: int | None = None,
    dtype: str = "float32",
    inplace: bool = False,
    root: int | None = None,
    op: str = "sum",
    placement: tuple[int, int] | None = None,
    machine: dict | None = None,
) -> Selection:
    """The plan a call of this shape gets where it runs at ``placement`` (None: no limit), and why. ``machine``
    (backend, gpu, gpus: ``machine_here``) picks the tuned table that counts, as an executor there would."""
    from loom.compiler.jit_plans import choose, plan_for_call, thread_blocks
    from loom.plan.cache import default_plans_enabled
    from loom.runtime.install_plans import ensure_default_plans_installed

    ranks_per_node = world_size if ranks_per_node is None else ranks_per_node
    if isinstance(message_bytes, bool) or not isinstance(message_bytes, int) or message_bytes < 0:
        raise InvalidArgumentError(f"message_bytes: expected 0 or more bytes, got {message_bytes!r}")
    if world_size < 1 or ranks_per_node < 1 or world_size % ranks_per_node:
        raise InvalidArgumentError(
            f"ranks_per_node: {ranks_per_node} does not divide the world size {world_size} into whole nodes"
        )
    native = native_module()
    ensure_default_plans_installed()
    native.registry_load_default_plans()
    if machine is not None:
        native.registry_load_tuned_table(**{**machine, "world_size": world_size, "ranks_per_node": ranks_per_node})
    rooted = collective in ("broadcast", "reduce")
    root = (root or 0) if rooted else None
    request = (collective, message_bytes, dtype, world_size, ranks_per_node, inplace, False, root, [], op)
    passed = [(entry.name, why) for entry, why in native.registry_passed_over(*request, placement)]
    chosen = native.registry_select(*request, placement)
    where = _placement_text(placement)
    if chosen is not None:
        entry = native.registry_find(chosen.name)
        sources = {"user": "user plan", "tuned": "tuned table", "bundled": "bundled table"}
        source = "JIT" if entry is None else sources[entry.source]
        blocks = None if entry is None else entry.thread_blocks
        why = {
            "user plan": f"a registered user plan (they come first), the narrowest that fits, with blocks that fit"
            f" {where}",
            "tuned table": f"this machine's tuned table (loom tune) for this size, before the bundled one; fits"
            f" {where}",
            "bundled table": f"the bundled table's plan for this size, with blocks that fit {where}",
            "JIT": f"a plan compiled on first use earlier in this process, with blocks that fit {where}",
        }[source]
        return Selection(chosen.name, source, placement, why, passed, blocks)
    if world_size == 1:
        return Selection(None, "none", placement, "a job of one rank moves nothing (a local copy out of place)", passed)
    if (
        not default_plans_enabled()
        or op != "sum"
        or choose(collective, world_size, ranks_per_node, message_bytes) is None
    ):
        return Selection(None, "none", placement, "no registered plan fits and no library algorithm serves it", passed)
    max_blocks = None if placement is None else placement[1] // max(placement[0], 1)
    try:
        found = plan_for_call(
            collective,
            world_size=world_size,
            ranks_per_node=ranks_per_node,
            message_bytes=message_bytes,
            inplace=inplace,
            root=root,
            max_thread_blocks=max_blocks,
        )
    except LoomError as error:
        return Selection(None, "none", placement, f"nothing can fit: {error}", passed)
    blocks = thread_blocks(found.text)
    why = "no registered plan fits" + (" where it runs" if passed else "") + ": the library's algorithm for the"
    why += f" shape, compiled on first use with blocks that fit {where}"
    return Selection(found.name, "JIT", placement, why, passed, blocks)


def _placement_text(placement: tuple[int, int] | None) -> str:
    if placement is None or placement[1] >= NO_LIMIT:
        return "anywhere (no placement limit)"
    sharing, blocks = placement
    ranks = f"{sharing} ranks sharing a GPU" if sharing > 1 else "one rank per GPU"
    return f"{ranks} that holds {blocks} blocks ({blocks // sharing} a rank)"


def format_selection(selection: Selection) -> str:
    lines = [f"plan:    {selection.plan or '(none)'}", f"source:  {selection.source}", f"why:     {selection.why}"]
    if selection.thread_blocks is not None:
        lines.append(f"blocks:  {selection.thread_blocks} thread blocks per rank")
    for name, why in selection.passed_over:
        lines.append(f"passed over {name}: {why}")
    return "\n".join(lines)


def machine_here(host_only: bool) -> dict:
    """This machine as a tuned table names it (less the world size): the CPU backend, or GPU 0's name and the
    number of GPUs torch sees."""
    if host_only:
        return {"backend": "cpu", "gpu": "", "gpus": 0}
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return {"backend": "gpu", "gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count()}
    except ImportError:
        pass
    return {"backend": "cpu", "gpu": "", "gpus": 0}


def placement_from_options(
    host_only: bool, ranks_per_node: int, sharing: int | None, resident: int | None
) -> tuple[int, int] | None:
    """The placement ``loom select`` asks about: given, else this machine's GPUs, else none (CPU backend)."""
    if resident is not None:
        return (sharing or 1, resident)
    if host_only:
        limit = os.environ.get("LOOM_CPU_RESIDENT_BLOCKS", "")
        if not limit:
            return None
        if not limit.isdigit() or int(limit) < 1:
            raise InvalidArgumentError(f"LOOM_CPU_RESIDENT_BLOCKS: expected a positive number of blocks, got {limit!r}")
        return ranks_per_node, int(limit)
    return gpu_placement(ranks_per_node)


__all__ = ["Selection", "explain", "format_selection", "gpu_placement", "machine_here", "placement_from_options"]
