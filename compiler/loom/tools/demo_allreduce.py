"""The algorithm `loom demo` compiles: a one-shot all-reduce over LL packets, for small messages.

It is written as a user would write their own (docs/dsl.md), with nothing but ``loom.language``:

- the message is cut into ``world_size`` chunks, and thread block ``i`` of every rank handles chunk ``i``;
- each rank sends its chunk ``i`` as packets into a slot of every peer's scratch (one slot per sender);
- then it waits for the packets of every peer and adds them to its own chunk ``i``.

One step of latency and no signal or wait: the packets carry their own flags. Every rank sends the
whole message to every peer, so this pays off only while messages are small; ``loom demo`` registers
it for all-reduces up to ``max_message_size`` and lets the bundled plans take the larger ones.
"""

from loom.language import AllReduce, Buffer, CollectiveProgram, MemoryChannel, Rank


def build(world_size=2, instances=4, inplace=True, max_message_size=64 * 1024, name="demo_allreduce_packets"):
    n = world_size
    program = CollectiveProgram(
        f"{name}_{n}r",
        AllReduce(n, 1, inplace),
        n,
        instances=instances,  # copies side by side, each on its share of every chunk: more thread blocks
        protocol="LL",
        num_threads_per_block=512,
        max_message_size=max_message_size,
    )
    with program:
        # Rank r keeps what sender s sent it in slot s (s < r) or s - 1 (s > r): world_size - 1 slots
        # of world_size chunks each.
        def slot(receiver, sender):
            return sender if sender < receiver else sender - 1

        scratch = [Buffer(r, (n - 1) * n) for r in range(n)]
        channels = {(r, p): MemoryChannel(p, r) for r in range(n) for p in range(n) if p != r}
        for r in range(n):
            rank = Rank(r)
            data = rank.get_input_buffer()
            result = data if inplace else rank.get_output_buffer()
            others = [(r + step) % n for step in range(1, n)]  # each rank starts on a different peer
            for i in range(n):
                for p in others:
                    at = slot(p, r) * n + i
                    channels[(r, p)].put_packets(scratch[p][at : at + 1], data[i : i + 1], tb=i)
                received = [scratch[r][slot(r, p) * n + i : slot(r, p) * n + i + 1] for p in others]
                rank.reduce(data[i : i + 1], received, tb=i, dst_chunk=result[i : i + 1], packet=True)
    return program
