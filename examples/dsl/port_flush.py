"""A port channel's source stays the proxy's until a flush (docs/dsl.md, "Rules that keep a plan right"): an
in-place all-reduce of two ranks on two nodes. Each rank puts its whole buffer into its peer's scratch over
a port channel, then sums the peer's copy into its own buffer, which overwrites what it sent. The proxy
reads a put's source when it gets to it, so the rank flushes the channel before it writes there.

    loom compile examples/dsl/port_flush.py -o port_flush.json
"""

from loom.language import AllReduce, Buffer, CollectiveProgram, PortChannel, Rank, SyncType


def build(world_size: int = 2, flush: bool = True) -> CollectiveProgram:
    if world_size != 2:
        raise ValueError("this example is for 2 ranks, one per node")
    program = CollectiveProgram(
        "allreduce_port_flush", AllReduce(2, 1, True), 2, ranks_per_node=1, max_message_size=1 << 20
    )
    with program:
        scratch = [Buffer(r, 2) for r in range(2)]
        channels = {r: PortChannel(1 - r, r) for r in range(2)}
        for r in range(2):
            peer, channel = 1 - r, channels[r]
            data = Rank(r).get_input_buffer()[0:2]
            channel.signal(tb=0, data_sync=SyncType.none)  # the handshake: the peer's scratch is free again
            channel.wait(tb=0, data_sync=SyncType.after)
            channel.put_with_signal(scratch[peer][0:2], data, tb=0)
            if flush:
                channel.flush(tb=0)  # the proxy has read `data`: it may be written now
            channel.wait(tb=0, data_sync=SyncType.after)
            Rank(r).reduce(data, [scratch[r][0:2]], tb=0)  # writes `data`, the put's source
    return program
