"""Enums and the chunk type the DSL's public classes use (the names MSCCL++ programs know)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class BufferType(enum.Enum):
    input = "input"
    output = "output"
    scratch = "scratch"

    def __str__(self) -> str:
        return self.value


class ChannelType(enum.Enum):
    memory = "memory"
    port = "port"
    switch = "switch"

    def __str__(self) -> str:
        return self.value


class SyncType(enum.IntFlag):
    """Where a sync op synchronises the threads of its block (plan field ``data_sync``)."""

    none = 0
    before = 1
    after = 2
    both = 3

    @property
    def plan_name(self) -> str:
        return {0: "none", 1: "before", 2: "after", 3: "both"}[int(self)]


class ReduceOperationType(enum.Enum):
    sum = "sum"
    min = "min"
    max = "max"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Chunk:
    """``size`` chunks of ``rank``'s ``buffer`` starting at ``index``: what ``buffer[i:j]`` returns."""

    rank: int
    buffer: BufferType
    index: int
    size: int


__all__ = ["BufferType", "ChannelType", "Chunk", "ReduceOperationType", "SyncType"]
