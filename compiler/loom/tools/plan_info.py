"""What `loom info` prints about a plan: shape, schedule size, ops by type, scratch and size range."""

from __future__ import annotations

from typing import Any


def _human_bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count} B"


# What the executor allocates (executor/src/buffer_layout.cc, counted_scratch.hpp): chunks are aligned to at
# least 16 bytes, and a counted plan's mailboxes take 16 bytes per channel.
MIN_CHUNK_ALIGNMENT = 16
MAILBOX_BYTES = 16


def scratch_bytes(plan: Any, message_bytes: int) -> int:
    """Scratch one rank needs at a message size, as the executor allocates it. Chunks are input-size /
    input_chunks rounded up to the alignment; LL packets carry half their size in data and an ll plan keeps
    two halves (one per call parity), so its scratch is four times its chunks' data. A counted plan
    (alltoallv) holds its mailboxes, and in an ll one its packet regions: per scratch chunk a count packet and
    the packets of max_message_bytes, in both halves."""
    ll = plan.protocol == "ll"
    if plan.collective == "alltoallv":
        channels = max(gpu["channels"] for gpu in plan.gpus)  # the count of each rank's channels
        mailboxes = -(-MAILBOX_BYTES * channels // 16) * 16
        if not ll:
            return mailboxes
        region = 16 + -(-plan.max_message_bytes // 8) * 16
        return mailboxes + 2 * plan.summary()["max_scratch_chunks"] * region
    input_chunks = plan.gpus[0]["input_chunks"]
    align = max(plan.alignment_bytes, MIN_CHUNK_ALIGNMENT)
    chunk = -(-message_bytes // input_chunks)
    chunk = -(-chunk // align) * align
    return plan.summary()["max_scratch_chunks"] * chunk * (4 if ll else 1)


def plan_info(plan: Any) -> dict[str, Any]:
    summary = plan.summary()
    return {
        "name": plan.name,
        "collective": plan.collective,
        "protocol": plan.protocol,
        "inplace": plan.inplace,
        "world_size": plan.world_size,
        "ranks_per_node": plan.ranks_per_node,
        "threads_per_block": plan.threads_per_block,
        "threadblocks": summary["threadblocks"],
        "max_threadblocks_per_rank": summary["max_threadblocks_per_rank"],
        "channels": summary["channels"],
        "ops_by_type": dict(sorted(summary["ops_by_type"].items())),
        "scratch_chunks_per_rank": summary["max_scratch_chunks"],
        "scratch_bytes_at_max_message": scratch_bytes(plan, plan.max_message_bytes),
        "min_message_bytes": plan.min_message_bytes,
        "max_message_bytes": plan.max_message_bytes,
        "alignment_bytes": plan.alignment_bytes,
        "compiler_version": plan.compiler_version,
        "source_hash": plan.source_hash,
    }


def format_plan_info(info: dict[str, Any]) -> str:
    ops = ", ".join(f"{name} {count}" for name, count in info["ops_by_type"].items()) or "none"
    lines = [
        f"plan          {info['name']}",
        f"collective    {info['collective']} ({'in-place' if info['inplace'] else 'out-of-place'}), "
        f"protocol {info['protocol']}",
        f"ranks         {info['world_size']} ({info['ranks_per_node']} per node)",
        f"thread blocks {info['threadblocks']} in all, at most {info['max_threadblocks_per_rank']} per rank, "
        f"{info['threads_per_block']} threads each",
        f"channels      {info['channels']}",
        f"ops           {sum(info['ops_by_type'].values())}: {ops}",
        f"scratch       {info['scratch_chunks_per_rank']} chunks per rank "
        f"({_human_bytes(info['scratch_bytes_at_max_message'])} at the largest message)",
        f"message size  {_human_bytes(info['min_message_bytes'])} to {_human_bytes(info['max_message_bytes'])}, "
        f"chunks aligned to {info['alignment_bytes']} B",
    ]
    if info["compiler_version"]:
        lines.append(f"compiler      {info['compiler_version']} (source hash {info['source_hash'] or 'none'})")
    return "\n".join(lines)
