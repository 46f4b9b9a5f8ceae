"""How channels pair (docs/dsl.md, "Rules that keep a plan right"): the i-th channel a rank declares to a peer
pairs with the i-th channel the peer declares back, and a signal reaches only the paired channel. Here each
pair has two channels, one for the data and one for "done"; with ``paired=False`` rank 1 declares them in the
other order, so its waits watch the channel rank 0 does not signal, and the compiler refuses the program.

    loom compile examples/dsl/channel_pairing.py -o channel_pairing.json
"""

from loom.language import CollectiveProgram, MemoryChannel, Rank, SendRecv, SyncType


def build(world_size: int = 2, paired: bool = True) -> CollectiveProgram:
    if world_size != 2:
        raise ValueError("this example is for 2 ranks")
    program = CollectiveProgram("sendrecv_two_channels", SendRecv(2, 1, False), 2, max_message_size=1 << 20)
    with program:
        for r in range(2):
            peer = 1 - r
            if r == 0 or paired:
                data, done = MemoryChannel(peer, r), MemoryChannel(peer, r)
            else:
                done, data = MemoryChannel(peer, r), MemoryChannel(peer, r)
            done.signal(tb=0, data_sync=SyncType.none, relaxed=True)  # my output is free
            done.wait(tb=0, data_sync=SyncType.after, relaxed=True)
            data.put(Rank(peer).get_output_buffer()[0:1], Rank(r).get_input_buffer()[0:1], tb=0)
            data.signal(tb=0, data_sync=SyncType.before)
            data.wait(tb=0, data_sync=SyncType.after)
    return program
