"""The compiler IR: plan-shaped dataclasses (model), their JSON conversion, and buffer shapes."""

from loom.ir.convert import plan_from_dict, plan_to_dict
from loom.ir.model import Channel, ChunkRef, Gpu, Op, Plan, Semaphore, SourceLoc, ThreadBlock

__all__ = [
    "Channel",
    "ChunkRef",
    "Gpu",
    "Op",
    "Plan",
    "Semaphore",
    "SourceLoc",
    "ThreadBlock",
    "plan_from_dict",
    "plan_to_dict",
]
