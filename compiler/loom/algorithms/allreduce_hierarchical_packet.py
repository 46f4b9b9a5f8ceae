"""Hierarchical all-reduce for 2 nodes, LL packets: small messages (up to 64 KiB by default) in one crossing.

Ranks ``[0, g)`` form node 0 and ``[g, 2g)`` node 1 (``g = ranks_per_node``); rank r's twin is the rank with the
same local index on the other node. The input is cut into 2g chunks; local rank l owns shard l (chunks 2l and
2l + 1).

1. Inside the node: every rank sends shard q of its input as packets to local rank q.
2. Local rank l reduces shard l of its input with the g - 1 received shards (polling their flags): the node's sum.
3. Across the nodes: it sends the node's sum as packets to its twin over the port channel (packed into the
   channel's staging area as the op runs, so no flush is needed before the sum is written over: over TCP a flush
   waits for the peer's acknowledgement, a round trip); then it adds the twin's packets to it: the sum over both
   nodes, in shard l of its output.
4. Inside the node: it sends the sum as packets to every local rank, which unpack it into shard l of their output.

No signal or wait at all: every step polls packet flags, and the executor double-buffers LL scratch, so a call
never overwrites packets a peer of the call before has not read (every rank hears from each peer it writes to in
the next call only after that peer is done with this one). So the link is crossed once per call, half a round
trip, where ``allreduce_hierarchical`` pays a handshake and a signal besides. Every rank sends g - 1 shards inside
the node twice and one shard across it: for latency-bound sizes.

Parameters: 2 nodes of 1 to 8 ranks (``world_size`` = 2 ``ranks_per_node``); ``instances``, ``inplace``,
``name``; options ``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import setup, slot, two_node_channels
from loom.language import AllReduce, Buffer, CollectiveProgram, Rank

NAME = "allreduce_hierarchical_packet"


def build(
    world_size: int,
    ranks_per_node: int | None = None,
    *,
    instances: int = 1,
    inplace: bool = False,
    name: str | None = None,
    **options: Any,
) -> CollectiveProgram:
    s = setup(NAME, world_size, ranks_per_node, instances, inplace, name, options)
    n, g = s.world_size, s.ranks_per_node
    program = CollectiveProgram(s.name, AllReduce(n, 1, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        # Scratch shards: g - 1 from local peers (step 1), the twin's sum (3), g - 1 sums (4).
        scratch = [Buffer(r, 2 * (2 * g - 1)) for r in range(n)]
        twin_at, sums_at = g - 1, g
        channels = two_node_channels(s)
        local, memory, port = channels.local, channels.memory, channels.port

        def shard(buffer, index: int):
            return buffer[2 * index : 2 * index + 2]

        for r in range(n):
            rank = Rank(r)
            source = rank.get_input_buffer()
            result = source if s.inplace else rank.get_output_buffer()
            mine = r % g
            own = shard(result, mine)
            # 1. Shard q of the input to local rank q.
            for p in local[r]:
                memory[(r, p)].put_packets(shard(scratch[p], slot(p % g, mine)), shard(source, p % g), tb=0)
            # 2. The node's sum of shard l, into shard l of the output (with one rank a node, the input's shard).
            received = [shard(scratch[r], slot(mine, p % g)) for p in local[r]]
            node_sum = own if received else shard(source, mine)
            if received:
                rank.reduce(shard(source, mine), received, tb=0, dst_chunk=own, packet=True)
            # 3. To the twin as packets over the port channel: the block packs them into the channel's staging
            # area as the op runs (the proxy reads that, not the output), so the sum may be written over at once,
            # with no flush, which over TCP would wait a round trip for the peer's acknowledgement. Then the
            # twin's sum added: the sum over both nodes.
            twin = (r + g) % n
            port[r].put_packets(shard(scratch[twin], twin_at), node_sum, tb=0)
            rank.reduce(node_sum, [shard(scratch[r], twin_at)], tb=0, dst_chunk=own, packet=True)
            # 4. The sum to every local rank, unpacked there.
            for p in local[r]:
                memory[(r, p)].put_packets(shard(scratch[p], sums_at + slot(p % g, mine)), own, tb=0)
            for p in local[r]:
                rank.unpack_packets(shard(result, p % g), shard(scratch[r], sums_at + slot(mine, p % g)), tb=0)
    return program
