"""A user DSL file for the tests: each rank puts its input into the next rank's output."""

from loom.language import CollectiveProgram, MemoryChannel, Rank, SendRecv


def build(world_size=2, name="user_sendrecv"):
    n = world_size
    with CollectiveProgram(name, SendRecv(n, 1, False), n) as program:
        for r in range(n):
            after, before = (r + 1) % n, (r - 1) % n
            channels = {p: MemoryChannel(p, r) for p in sorted({after, before})}
            channels[before].signal(tb=0, relaxed=True)
            channels[after].wait(tb=0, relaxed=True)
            channels[after].put(Rank(after).get_output_buffer()[0:1], Rank(r).get_input_buffer()[0:1], tb=0)
            channels[after].signal(tb=0)
            channels[before].wait(tb=0)
    return program
