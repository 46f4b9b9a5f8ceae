"""AlgoSpec (a program's parameters in one value) and ReplicationPolicy."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from loom.language.collectives import Collective


class ReplicationPolicy(enum.Enum):
    """How instances share the buffers. ``interleaved``: every instance takes its own share of every
    chunk (Loom cuts each slot of a buffer into one contiguous part per instance). ``none`` is not
    supported: instances working on the same chunks would race."""

    interleaved = "interleaved"
    none = "none"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class AlgoSpec:
    name: str
    collective: Collective
    nranks_per_node: int
    world_size: int
    in_place: bool
    instances: int
    protocol: str
    instr_fusion: bool = True
    auto_sync: bool = True
    replication_policy: ReplicationPolicy = ReplicationPolicy.interleaved
    reuse_resources: bool = False
    num_threads_per_block: int = 1024
    use_double_scratch_buffer: bool = False
    buffer_alignment: int = 16
    min_message_size: int = 0
    max_message_size: int = 2**64 - 1
    tags: dict = field(default_factory=dict)


__all__ = ["AlgoSpec", "ReplicationPolicy"]
