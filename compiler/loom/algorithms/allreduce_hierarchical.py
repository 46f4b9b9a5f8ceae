"""Hierarchical all-reduce for 2 nodes, simple protocol: any message size (up to 1 GiB by default).

Ranks ``[0, g)`` form node 0 and ``[g, 2g)`` node 1 (``g = ranks_per_node = world_size / 2``);
rank r's twin is the rank with the same local index on the other node. The input is cut into
2g chunks; local rank l owns shard l (chunks 2l and 2l + 1).

0. Handshake with every local peer (memory channels) and with the twin (port channel).
1. Intra-node reduce-scatter: put shard q of the input into local rank q's scratch; signal/wait.
2. Reduce: shard l of the input plus the g - 1 received shards, into shard l of the output; it
   now holds the node's sum.
3. Inter-node exchange over the port channel: put the node's sum of shard l into the twin's
   scratch, signal, flush (the proxy has finished reading it, so it may be overwritten), wait for
   the twin's; reduce it into shard l, which now holds the sum over both nodes.
4. Intra-node all-gather: put shard l into every local peer's output; signal/wait.

Only 1/g of the message crosses the network per rank, in one step.

Parameters: ``world_size`` 4 to 16 with ``ranks_per_node = world_size / 2`` (2 nodes of 2 to 8
GPUs); ``instances``, ``inplace``, ``name``; options ``min_message_size``, ``max_message_size``,
``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import setup, slot, two_node_channels
from loom.language import AllReduce, Buffer, CollectiveProgram, Rank, SyncType

NAME = "allreduce_hierarchical"


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
        # Scratch: g - 1 shards from local peers, then one shard from the twin.
        scratch = [Buffer(r, 2 * g) for r in range(n)]
        remote = 2 * (g - 1)
        channels = two_node_channels(s)
        local, memory, port = channels.local, channels.memory, channels.port
        results = [Rank(r).get_input_buffer() if s.inplace else Rank(r).get_output_buffer() for r in range(n)]

        def shard(buffer, local_rank: int):
            return buffer[2 * local_rank : 2 * local_rank + 2]

        for r in range(n):
            rank = Rank(r)
            source = rank.get_input_buffer()
            mine = r % g
            # 0. Handshake.
            for p in local[r]:
                memory[(r, p)].signal(tb=0, data_sync=SyncType.none, relaxed=True)
            port[r].signal(tb=0, data_sync=SyncType.none, relaxed=True)
            for p in local[r]:
                memory[(r, p)].wait(tb=0, data_sync=SyncType.after, relaxed=True)
            port[r].wait(tb=0, data_sync=SyncType.after, relaxed=True)
            # 1. Intra-node reduce-scatter.
            for p in local[r]:
                at = 2 * slot(p % g, mine)
                memory[(r, p)].put(scratch[p][at : at + 2], shard(source, p % g), tb=0)
            for p in local[r]:
                memory[(r, p)].signal(tb=0, data_sync=SyncType.before)
            for p in local[r]:
                memory[(r, p)].wait(tb=0, data_sync=SyncType.after)
            # 2. The node's sum of shard l.
            received = [scratch[r][2 * slot(mine, p % g) : 2 * slot(mine, p % g) + 2] for p in local[r]]
            rank.reduce(shard(source, mine), received, tb=0, dst_chunk=shard(results[r], mine))
            # 3. Exchange with the twin over the port channel.
            port[r].put(scratch[(r + g) % n][remote : remote + 2], shard(results[r], mine), tb=0)
            port[r].signal(tb=0, data_sync=SyncType.before)
            port[r].flush(tb=0)
            port[r].wait(tb=0, data_sync=SyncType.after)
            rank.reduce(shard(results[r], mine), [scratch[r][remote : remote + 2]], tb=0)
            # 4. Intra-node all-gather.
            for p in local[r]:
                memory[(r, p)].put(shard(results[p], mine), shard(results[r], mine), tb=0)
            for p in local[r]:
                memory[(r, p)].signal(tb=0, data_sync=SyncType.before)
            for p in local[r]:
                memory[(r, p)].wait(tb=0, data_sync=SyncType.after)
    return program
