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

    ``LoopIterationContext(unit=2**20, num_chunks=1)`` sizes the slices in bytes, as MSCCL++ does:
    iteration i works on bytes [i * unit, (i + 1) * unit) of every chunk range in the body, and the
    body runs as often as the longest range needs in the call (``num_chunks``, if given, must be
    that range's length in chunks, which is how MSCCL++ counts the iterations).
    """

    def __init__(
        self, unit: int | None = None, num_chunks: int | None = None, *, iterations: int | None = None
    ) -> None:
        self.unit_bytes: int | None = None
        self.iterations: int | None = None
        self.num_chunks = num_chunks
        if unit is not None:
            if iterations is not None:
                raise DSLError("give either unit= (bytes per iteration) or iterations=, not both", caller_location())
            if not isinstance(unit, int) or not 16 <= unit < 1 << 32 or unit % 16:
                raise DSLError(f"unit must be a multiple of 16 bytes below 2**32, got {unit!r}", caller_location())
            if num_chunks is not None and (not isinstance(num_chunks, int) or num_chunks < 1):
                raise DSLError(f"num_chunks must be a positive integer, got {num_chunks!r}", caller_location())
            self.unit_bytes = unit
        else:
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
                pipelines[key] = ir.Op(
                    "pipeline", iterations=self.iterations, unit_bytes=self.unit_bytes, loc=op.loc, seq=op.seq
                )
            pipelines[key].body.append(op)
        for (rank, tb), pipeline in pipelines.items():
            self._check_num_chunks(rank, tb, pipeline)
            program.gpu(rank).threadblock(tb).ops.append(pipeline)

    def _check_num_chunks(self, rank: int, tb: int, pipeline: ir.Op) -> None:
        """MSCCL++ runs num_chunks x chunk size / unit iterations; Loom counts them from the body's
        longest range, so the two agree only when num_chunks is that range's length."""
        if self.unit_bytes is None or self.num_chunks is None:
            return
        longest = pipeline.longest_range() or self.num_chunks
        if longest != self.num_chunks:
            raise DSLError(
                f"rank {rank} tb {tb}: LoopIterationContext(num_chunks={self.num_chunks}) but the longest chunk"
                f" range in its body has {longest} chunk(s); the iterations follow that range (unit bytes each),"
                f" so give num_chunks={longest} or leave it out",
                pipeline.loc,
            )

    def add_operation(self, rank: int, tb: int, op: ir.Op) -> None:
        self.operations.append((rank, tb, op))


__all__ = ["LoopIterationContext"]
