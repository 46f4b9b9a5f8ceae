"""Pipelined loops: ops recorded inside a LoopIterationContext repeat over slices of their chunks."""

from __future__ import annotations

from loom.errors import DSLError
from loom.ir import model as ir
from loom.language.program import caller_location, get_program


class LoopIterationContext:
    """``with LoopIterationContext(iterations=4):`` — every op recorded inside becomes part of a
    ``pipeline`` op of its thread block, which runs the body 4 times, iteration i on the i-th
    quarter of every chunk range in the body. Overlapping the steps of consecutive slices hides
    latency on large messages.

    MSCCL++ sizes its loops in bytes (``unit``); plan format v1 fixes the number of iterations,
    so ``unit=`` is refused with a message rather than guessed at.
    """

    def __init__(
        self, unit: int | None = None, num_chunks: int | None = None, *, iterations: int | None = None
    ) -> None:
        if unit is not None:
            raise DSLError(
                "LoopIterationContext(unit=...) sizes iterations in bytes, which plan format v1 cannot express; "
                "write LoopIterationContext(iterations=N) to repeat the body over N equal slices",
                caller_location(),
            )
        count = iterations if iterations is not None else num_chunks
        if not isinstance(count, int) or not 1 <= count <= 65536:
            raise DSLError(f"iterations must be an integer from 1 to 65536, got {count!r}", caller_location())
        self.iterations = count
        self.operations: list[tuple[int, int, ir.Op]] = []

    def __enter__(self) -> LoopIterationContext:
        get_program().set_loop_context(self)
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        program = get_program()
        program.set_loop_context(None)
        if exc_type is not None:
            return
        pipelines: dict[tuple[int, int], ir.Op] = {}
        for rank, tb, op in self.operations:
            if op.op == "barrier":
                raise DSLError("a barrier cannot be part of a pipeline body", op.loc)
            key = (rank, tb)
            if key not in pipelines:
                pipelines[key] = ir.Op("pipeline", iterations=self.iterations, loc=op.loc, seq=op.seq)
            pipelines[key].body.append(op)
        for (rank, tb), pipeline in pipelines.items():
            program.gpu(rank).threadblock(tb).ops.append(pipeline)

    def add_operation(self, rank: int, tb: int, op: ir.Op) -> None:
        self.operations.append((rank, tb, op))


__all__ = ["LoopIterationContext"]
