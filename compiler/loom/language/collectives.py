"""The collectives a program implements: buffer sizes (in chunks) and pre-/postconditions.

Precondition, for every collective: chunk i of rank r's input holds the contribution (r, i).
Postcondition: what each output chunk holds at the end, as a set of contributions
(``expected_output``). The compiler uses the buffer sizes and checks that every output chunk is
written at all; the verifier proves the full postcondition.
"""

from __future__ import annotations

Contribution = tuple[int, int]  # (rank, input chunk index)


class Collective:
    """Base class. ``chunk_factor`` is how many chunks each per-rank piece of data is cut into."""

    name = ""
    has_postcondition = True  # what each output chunk must hold is known (expected_output)

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool) -> None:
        if not isinstance(num_ranks, int) or num_ranks < 1:
            raise ValueError(f"num_ranks must be a positive integer, got {num_ranks!r}")
        if not isinstance(chunk_factor, int) or chunk_factor < 1:
            raise ValueError(f"chunk_factor must be a positive integer, got {chunk_factor!r}")
        self.num_ranks = num_ranks
        self.chunk_factor = chunk_factor
        self.inplace = bool(inplace)

    @property
    def input_chunks(self) -> int:
        return self.chunk_factor

    @property
    def output_chunks(self) -> int:
        return self.chunk_factor

    def expected_output(self, rank: int, index: int) -> frozenset[Contribution]:
        raise NotImplementedError

    def inplace_prefilled(self, rank: int) -> range:
        """Output chunks that already hold their final value when input and output alias."""
        return range(0)

    def has_output(self, rank: int) -> bool:
        """Whether ``rank``'s output is part of the result (a reduce's is at the root only)."""
        return True

    def __repr__(self) -> str:
        kind = type(self).__name__
        return f"{kind}(num_ranks={self.num_ranks}, chunk_factor={self.chunk_factor}, inplace={self.inplace})"


class AllReduce(Collective):
    """Every rank ends with the reduction over all ranks of the whole buffer (num_ranks x chunk_factor chunks)."""

    name = "allreduce"

    @property
    def input_chunks(self) -> int:
        return self.num_ranks * self.chunk_factor

    @property
    def output_chunks(self) -> int:
        return self.input_chunks

    def expected_output(self, rank: int, index: int) -> frozenset[Contribution]:
        return frozenset((r, index) for r in range(self.num_ranks))


class AllGather(Collective):
    """Output chunk r x chunk_factor + i of every rank holds rank r's input chunk i."""

    name = "allgather"

    @property
    def output_chunks(self) -> int:
        return self.num_ranks * self.chunk_factor

    def expected_output(self, rank: int, index: int) -> frozenset[Contribution]:
        return frozenset({divmod(index, self.chunk_factor)})

    def inplace_prefilled(self, rank: int) -> range:
        return range(rank * self.chunk_factor, (rank + 1) * self.chunk_factor)


class ReduceScatter(Collective):
    """Rank q's output chunk i is the reduction over all ranks of input chunk q x chunk_factor + i."""

    name = "reducescatter"

    @property
    def input_chunks(self) -> int:
        return self.num_ranks * self.chunk_factor

    def expected_output(self, rank: int, index: int) -> frozenset[Contribution]:
        return frozenset((r, rank * self.chunk_factor + index) for r in range(self.num_ranks))


class AllToAll(Collective):
    """Rank q's output chunk r x chunk_factor + i holds rank r's input chunk q x chunk_factor + i."""

    name = "alltoall"

    @property
    def input_chunks(self) -> int:
        return self.num_ranks * self.chunk_factor

    @property
    def output_chunks(self) -> int:
        return self.input_chunks

    def expected_output(self, rank: int, index: int) -> frozenset[Contribution]:
        source, piece = divmod(index, self.chunk_factor)
        return frozenset({(source, rank * self.chunk_factor + piece)})

    def inplace_prefilled(self, rank: int) -> range:
        return range(rank * self.chunk_factor, (rank + 1) * self.chunk_factor)


class AllToAllV(AllToAll):
    """All-to-all with per-peer sizes given at call time (all-to-all-v): slot p of a rank's input is its
    send entry to rank p, slot r of its output its receive entry from rank r, each (offset, bytes) from
    the call's table; chunk i of a slot is the i-th of chunk_factor equal parts of that entry. The plan
    is all-to-all's with byte ranges read at run time, so its postcondition is all-to-all's. A put into a
    peer's output needs the peer's receive entry, which the peer publishes first (``publish``). Out of
    place only: an entry of the input may overlap any entry of the output in place."""

    name = "alltoallv"

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool) -> None:
        if inplace:
            raise ValueError("alltoallv runs out of place only (input and output entries may overlap in place)")
        super().__init__(num_ranks, chunk_factor, inplace)


class RootedCollective(Collective):
    """A collective with a root rank (broadcast, reduce)."""

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool, root: int = 0) -> None:
        super().__init__(num_ranks, chunk_factor, inplace)
        if not isinstance(root, int) or not 0 <= root < num_ranks:
            raise ValueError(f"root must be a rank from 0 to {num_ranks - 1}, got {root!r}")
        self.root = root


class Broadcast(RootedCollective):
    """Every rank's output holds the root's input."""

    name = "broadcast"

    def expected_output(self, rank: int, index: int) -> frozenset[Contribution]:
        return frozenset({(self.root, index)})

    def inplace_prefilled(self, rank: int) -> range:
        return range(self.chunk_factor) if rank == self.root else range(0)


class Reduce(RootedCollective):
    """The root's output holds the reduction over all ranks of the input; the other ranks' outputs are not
    part of the result (a plan must not write them: NCCL lets a non-root rank pass any buffer, or none)."""

    name = "reduce"

    def has_output(self, rank: int) -> bool:
        return rank == self.root

    def expected_output(self, rank: int, index: int) -> frozenset[Contribution]:
        if rank != self.root:
            raise ValueError(f"a reduce has no postcondition for rank {rank}'s output (only the root {self.root}'s)")
        return frozenset((r, index) for r in range(self.num_ranks))


class SendRecv(Collective):
    """Each rank sends its input to one other rank, in a pattern the program picks (a ring, pairs, rank +
    4), as in MSCCL++: rank q's output holds rank p(q)'s input for a permutation p without fixed points.
    ``expected_output`` states the ring's (rank q - 1's input); the verifier reads p from the plan."""

    name = "sendrecv"

    def expected_output(self, rank: int, index: int) -> frozenset[Contribution]:
        return frozenset({((rank - 1) % self.num_ranks, index)})


class TestCollective(Collective):
    """MSCCL++'s collective for programs that exercise single ops: ``input_size`` and ``output_size``
    chunks per rank (0 allowed), not in place, and no postcondition: nothing says what the output
    must hold, so the compiler does not require every output chunk to be written and the verifier
    checks races, deadlocks, bounds and packets only (it says so). Plans of it verify but do not run:
    the executor runs the six collectives only."""

    name = "test"
    has_postcondition = False
    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, num_ranks: int, input_size: int, output_size: int) -> None:
        super().__init__(num_ranks, 1, False)
        for what, value in (("input_size", input_size), ("output_size", output_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{what} must be a non-negative integer (chunks per rank), got {value!r}")
        self.input_size = input_size
        self.output_size = output_size

    @property
    def input_chunks(self) -> int:
        return self.input_size

    @property
    def output_chunks(self) -> int:
        return self.output_size

    def expected_output(self, rank: int, index: int) -> frozenset[Contribution]:
        raise NotImplementedError("a TestCollective has no postcondition")

    def __repr__(self) -> str:
        return (
            f"TestCollective(num_ranks={self.num_ranks}, input_size={self.input_size}, output_size={self.output_size})"
        )


__all__ = [
    "AllGather",
    "AllReduce",
    "AllToAll",
    "Broadcast",
    "Collective",
    "Reduce",
    "ReduceScatter",
    "SendRecv",
    "TestCollective",
]
