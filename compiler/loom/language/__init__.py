"""The Loom DSL: write a collective algorithm over ranks, buffers, chunks and channels.

The modules and names follow the MSCCL++ DSL, so ``from loom.language.channel import *`` etc.
replaces ``from mscclpp.language.channel import *``. ``from loom.language import *`` brings in
every public name at once. docs/dsl.md is the tutorial and reference.
"""

from loom.language.channel import MemoryChannel, PortChannel, SwitchChannel
from loom.language.collectives import (
    AllGather,
    AllReduce,
    AllToAll,
    AllToAllV,
    Broadcast,
    Collective,
    Reduce,
    ReduceScatter,
    SendRecv,
    TestCollective,
)
from loom.language.general import JSON
from loom.language.loop import LoopIterationContext
from loom.language.program import CollectiveProgram, get_program
from loom.language.rank import BaseBuffer, Buffer, Rank, Semaphore
from loom.language.thread_block_group import ThreadBlockGroup
from loom.language.types import BufferType, ChannelType, Chunk, ReduceOperationType, SyncType
from loom.language.utils import AlgoSpec, ReplicationPolicy

__all__ = [
    "JSON",
    "AlgoSpec",
    "AllGather",
    "AllReduce",
    "AllToAll",
    "AllToAllV",
    "BaseBuffer",
    "Broadcast",
    "Buffer",
    "BufferType",
    "ChannelType",
    "Chunk",
    "Collective",
    "CollectiveProgram",
    "LoopIterationContext",
    "MemoryChannel",
    "PortChannel",
    "Rank",
    "Reduce",
    "ReduceOperationType",
    "ReduceScatter",
    "ReplicationPolicy",
    "Semaphore",
    "SendRecv",
    "TestCollective",
    "SwitchChannel",
    "SyncType",
    "ThreadBlockGroup",
    "get_program",
]
