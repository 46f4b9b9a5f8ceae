"""The cross-call handshake (docs/dsl.md, "Rules that keep a plan right"): an all-gather in which every rank
puts its input straight into its peers' outputs. A rank may start call k+1 while a peer still reads the
output of call k, so each call begins with a relaxed signal and wait per peer: "my output is free again".

    loom compile examples/dsl/handshake.py --world-size 4 -o handshake.json
"""

from loom.language import AllGather, CollectiveProgram, MemoryChannel, Rank, SyncType


def build(world_size: int = 2, handshake: bool = True) -> CollectiveProgram:
    n = world_size
    program = CollectiveProgram("allgather_handshake", AllGather(n, 1, False), n, max_message_size=1 << 20)
    with program:
        channels = {(r, p): MemoryChannel(p, r) for r in range(n) for p in range(n) if p != r}
        for r in range(n):
            rank = Rank(r)
            mine = rank.get_input_buffer()[0:1]
            for p in range(n):
                if p == r:
                    continue
                channel = channels[(r, p)]
                if handshake:  # orders only what came before this call: the peer's reads of its last output
                    channel.signal(tb=0, data_sync=SyncType.none, relaxed=True)
                    channel.wait(tb=0, data_sync=SyncType.after, relaxed=True)
                channel.put(Rank(p).get_output_buffer()[r : r + 1], mine, tb=0)
                channel.signal(tb=0, data_sync=SyncType.before)  # publishes the put: a plain signal
                channel.wait(tb=0, data_sync=SyncType.after)
            rank.copy(rank.get_output_buffer()[r : r + 1], mine, tb=1)
    return program
