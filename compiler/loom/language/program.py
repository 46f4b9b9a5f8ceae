"""CollectiveProgram: the context that records a DSL program and compiles it into a plan."""

from __future__ import annotations

import contextvars
import inspect
import json
import os
from collections import defaultdict
from typing import Any

from loom.errors import DSLError
from loom.ir import model as ir
from loom.language.collectives import Broadcast, Collective, Reduce
from loom.language.utils import AlgoSpec, ReplicationPolicy

_LANGUAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_DIR = os.path.dirname(_LANGUAGE_DIR)
_MAX_MESSAGE_BYTES = (1 << 53) - 1  # the largest size plan JSON carries exactly
# A program that names no maximum is for messages up to 1 GiB per rank, as the library's plans are: scratch is
# sized for the largest message, and "any size" would ask for more than any GPU has.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30

# Per thread (and asyncio task): programs recorded at once on several threads stay apart.
_current: contextvars.ContextVar[CollectiveProgram | None] = contextvars.ContextVar("loom_program", default=None)


def get_program() -> CollectiveProgram:
    """The program being recorded (the innermost ``with CollectiveProgram(...)``)."""
    program = _current.get()
    if program is None:
        raise DSLError(
            "no CollectiveProgram is active: create ranks, buffers and channels inside `with CollectiveProgram(...)`",
            caller_location(),
        )
    return program


def caller_location() -> ir.SourceLoc | None:
    """The user's line that called into the DSL: the first frame outside loom.language and loom.passes."""
    frame = inspect.currentframe()
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_LANGUAGE_DIR + os.sep):
            if path.startswith(_PACKAGE_DIR + os.sep):
                name = os.path.relpath(path, os.path.dirname(_PACKAGE_DIR))  # loom/algorithms/x.py
            else:
                name = os.path.basename(path)  # a user's file: its name, so output does not depend on the cwd
            return ir.SourceLoc(name.replace(os.sep, "/"), frame.f_lineno)
        frame = frame.f_back
    return None


def _caller_source() -> str:
    """The text of the file that creates the program (hashed into the plan's metadata)."""
    frame = inspect.currentframe()
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_LANGUAGE_DIR + os.sep):
        frame = frame.f_back
    try:
        with open(frame.f_code.co_filename, encoding="utf-8") as handle:
            return handle.read()
    except (AttributeError, OSError):
        return ""  # an interactive session or `python -c`: only the parameters are hashed


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise DSLError(message, caller_location())


class CollectiveProgram:
    """Records a collective program; ``to_json()`` compiles it.

    Args mirror MSCCL++'s: ``num_ranks`` is the world size; ``protocol`` is ``"Simple"``/``"simple"``
    or ``"LL"``/``"ll"``; ``instances`` replicates the program over disjoint shares of every chunk;
    ``instr_fusion`` runs the fusion passes; ``auto_sync`` inserts the thread-block syncs that data
    dependencies need; ``num_threads_per_block``, ``buffer_alignment``, ``min/max_message_size``
    (bytes) go into the plan (the maximum defaults to 1 GiB, not MSCCL++'s "any size"). Loom additions:
    ``ranks_per_node`` (default: all ranks on one node), ``reuse_scratch`` (plan field). ``reuse_resources``
    and ``use_double_scratch_buffer`` are recorded in the plan metadata only: Loom always double-buffers LL
    scratch.
    """

    def __init__(
        self,
        name: str,
        collective: Collective,
        num_ranks: int,
        instances: int = 1,
        protocol: str = "Simple",
        instr_fusion: bool = True,
        auto_sync: bool = True,
        replication_policy: ReplicationPolicy = ReplicationPolicy.interleaved,
        reuse_resources: bool = False,
        num_threads_per_block: int = 1024,
        use_double_scratch_buffer: bool = False,
        buffer_alignment: int = 16,
        min_message_size: int = 0,
        max_message_size: int = DEFAULT_MAX_MESSAGE_BYTES,
        *,
        ranks_per_node: int | None = None,
        reuse_scratch: bool = False,
    ) -> None:
        _check(isinstance(name, str) and 0 < len(name) <= 256, f"name must be a non-empty string, got {name!r}")
        _check(
            isinstance(collective, Collective),
            f"collective must be a Collective (AllReduce(...), ...), got {collective!r}",
        )
        _check(
            num_ranks == collective.num_ranks,
            f"num_ranks is {num_ranks} but the collective was made for {collective.num_ranks} ranks",
        )
        ranks_per_node = num_ranks if ranks_per_node is None else ranks_per_node
        _check(
            isinstance(ranks_per_node, int) and ranks_per_node >= 1 and num_ranks % ranks_per_node == 0,
            f"ranks_per_node must divide num_ranks {num_ranks}, got {ranks_per_node!r}",
        )
        _check(
            isinstance(instances, int) and instances >= 1, f"instances must be a positive integer, got {instances!r}"
        )
        _check(str(protocol).lower() in ("simple", "ll"), f'protocol must be "Simple" or "LL", got {protocol!r}')
        _check(
            replication_policy == ReplicationPolicy.interleaved,
            "replication_policy=none is not supported: instances sharing chunks would race; use interleaved",
        )
        _check(
            isinstance(num_threads_per_block, int)
            and 32 <= num_threads_per_block <= 1024
            and num_threads_per_block % 32 == 0,
            f"num_threads_per_block must be a multiple of 32 from 32 to 1024, got {num_threads_per_block!r}",
        )
        _check(
            buffer_alignment in {1 << k for k in range(13)},
            f"buffer_alignment must be a power of two from 1 to 4096, got {buffer_alignment!r}",
        )
        _check(
            isinstance(min_message_size, int) and 0 <= min_message_size <= min(max_message_size, _MAX_MESSAGE_BYTES),
            f"min_message_size must be from 0 to max_message_size, got {min_message_size!r}",
        )
        self.name = name
        self.collective = collective
        self.num_ranks = num_ranks
        self.instances = instances
        self.protocol = str(protocol).lower()
        self.instr_fusion = instr_fusion
        self.auto_sync = auto_sync
        self.parameters = {
            "instances": instances,
            "instr_fusion": bool(instr_fusion),
            "auto_sync": bool(auto_sync),
            "reuse_resources": bool(reuse_resources),
            "use_double_scratch_buffer": bool(use_double_scratch_buffer),
            "chunk_factor": collective.chunk_factor,
        }
        self.plan = ir.Plan(
            name=name,
            collective=collective.name,
            protocol=self.protocol,
            world_size=num_ranks,
            ranks_per_node=ranks_per_node,
            inplace=collective.inplace,
            threads_per_block=num_threads_per_block,
            min_message_bytes=min_message_size,
            max_message_bytes=min(max_message_size, _MAX_MESSAGE_BYTES),
            alignment_bytes=buffer_alignment,
            reuse_scratch=reuse_scratch,
            root=collective.root if isinstance(collective, (Broadcast, Reduce)) else None,
        )
        for rank in range(num_ranks):
            self.plan.gpus.append(ir.Gpu(rank, collective.input_chunks, collective.output_chunks))
        self.source_text = _caller_source()
        self.loop_context = None
        self._seq = 0
        self._barrier_ids: dict[int, int] = defaultdict(int)
        self._compiled: ir.Plan | None = None

    @classmethod
    def from_spec(cls, spec: AlgoSpec) -> CollectiveProgram:
        return cls(
            spec.name,
            spec.collective,
            spec.world_size,
            instances=spec.instances,
            protocol=spec.protocol,
            instr_fusion=spec.instr_fusion,
            auto_sync=spec.auto_sync,
            replication_policy=spec.replication_policy,
            reuse_resources=spec.reuse_resources,
            num_threads_per_block=spec.num_threads_per_block,
            use_double_scratch_buffer=spec.use_double_scratch_buffer,
            buffer_alignment=spec.buffer_alignment,
            min_message_size=spec.min_message_size,
            max_message_size=spec.max_message_size,
            ranks_per_node=spec.nranks_per_node,
        )

    def __enter__(self) -> CollectiveProgram:
        self._token = _current.set(self)
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _current.reset(self._token)

    # -- recording (called by Rank, Buffer, channels, Semaphore, LoopIterationContext) --

    def gpu(self, rank: int) -> ir.Gpu:
        return self.plan.gpus[rank]

    def check_rank(self, rank: object, what: str = "rank") -> int:
        _check(
            isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < self.num_ranks,
            f"{what} {rank!r} is out of range: this program has ranks 0 to {self.num_ranks - 1}",
        )
        return rank

    def add_operation(self, rank: int, tb: int, op: ir.Op) -> None:
        if self._compiled is not None:
            raise DSLError("the program was already compiled; record every op before to_json()", caller_location())
        op.loc = op.loc or caller_location()
        op.seq = self._seq
        self._seq += 1
        if self.loop_context is not None:
            self.loop_context.add_operation(rank, tb, op)
        else:
            self.gpu(rank).threadblock(tb).ops.append(op)

    def add_channel(self, rank: int, channel: ir.Channel) -> int:
        gpu = self.gpu(rank)
        channel.id = len(gpu.channels)
        gpu.channels.append(channel)
        return channel.id

    def add_semaphore(self, rank: int, initial_value: int) -> int:
        gpu = self.gpu(rank)
        semaphore = ir.Semaphore(len(gpu.semaphores), initial_value)
        gpu.semaphores.append(semaphore)
        return semaphore.id

    def new_barrier_id(self, rank: int) -> int:
        value = self._barrier_ids[rank]
        self._barrier_ids[rank] += 1
        return value

    def declare_scratch(self, rank: int, size: int) -> int:
        gpu = self.gpu(rank)
        offset = gpu.scratch_chunks
        gpu.scratch_chunks += size
        return offset

    def set_loop_context(self, context) -> None:
        if self.loop_context is not None and context is not None:
            raise DSLError("pipelines do not nest: this LoopIterationContext is inside another", caller_location())
        self.loop_context = context

    # -- compiling --

    def compile(self) -> ir.Plan:
        """Run the passes once and return the finished IR (later calls return the same)."""
        if self._compiled is None:
            if self.loop_context is not None:
                raise DSLError("to_json() inside a LoopIterationContext: close the loop first", caller_location())
            from loom.passes import compile_program

            self._compiled = compile_program(self)
        return self._compiled

    def post_process_operations(self) -> None:
        """What MSCCL++'s compile path calls before writing JSON (fusion, syncs, instances): here the
        passes, run once (``compile``); ``to_json`` runs them itself, so calling this is optional."""
        self.compile()

    def to_json(self, indent: int | str | None = None, **json_options: Any) -> str:
        """The plan as canonical JSON text (schema-checked). With ``indent`` or other ``json.dumps``
        options (MSCCL++'s signature), the same plan formatted as asked: not the canonical text, but it
        loads, verifies and runs the same."""
        from loom.compiler.emit import emit_plan_text

        text = emit_plan_text(self)
        if indent is None and not json_options:
            return text
        return json.dumps(json.loads(text), indent=indent, **json_options)


# `from ...program import *` also gives the collectives and ReplicationPolicy, as in MSCCL++.
__all__ = ["AlgoSpec", "CollectiveProgram", "ReplicationPolicy", "get_program"]
