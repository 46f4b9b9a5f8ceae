"""Hierarchical all-reduce for any number of nodes, one GPU per node included, simple protocol: any
message size (up to 1 GiB by default).

Ranks ``[kg, (k + 1)g)`` form node k (``g = ranks_per_node``, N = world_size / g nodes); the rank of
local index l on node k is twin k of shard l. The input is cut into g x N chunks: local rank l owns
shard l (chunks lN to lN + N - 1), and twin k of shard l owns chunk k of it (chunk lN + k).

0. Handshake with every local peer (memory channels) and every twin (port channels).
1. Intra-node reduce-scatter: put shard q of the input into local rank q's scratch; signal/wait.
2. Reduce: shard l of the input plus the g - 1 received shards, into shard l of the output; it
   now holds the node's sum of shard l.
3. Among the twins, over port channels: put chunk j of the node's sum into twin j's scratch, signal,
   flush, wait for the other twins'; reduce chunk k over every node into the output (a reduce-scatter);
   then put it into every twin's output, signal, flush, wait (an all-gather).
4. Intra-node all-gather: put shard l into every local peer's output; signal/wait.

Each chunk is reduced by one rank only, so every rank ends with the same bits (twins that each added
up the whole shard, as allreduce_hierarchical's two do, would add in different orders from three nodes
on). One GPU per node (g = 1) has no intra-node steps. Across nodes each rank sends (N - 1)/(gN) of
the message twice. allreduce_hierarchical, one exchange of whole shards, is the bundled choice for 2
nodes of 2 and more; this one serves the other shapes.

Parameters: ``world_size`` = nodes x ``ranks_per_node``, 2 and more nodes of 1 to 8 GPUs, 32 ranks at
most (loom.algorithms.MULTI_NODE_SHAPES); ``instances``, ``inplace``, ``name``; options
``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import setup, slot
from loom.language import AllReduce, Buffer, CollectiveProgram, MemoryChannel, PortChannel, Rank, SyncType

NAME = "allreduce_hierarchical_rs_ag"


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
    n, g, nodes = s.world_size, s.ranks_per_node, s.nodes
    program = CollectiveProgram(s.name, AllReduce(n, 1, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        # Scratch: g - 1 shards (N chunks each) from local peers, then N - 1 chunks from the twins.
        from_twins = (g - 1) * nodes
        scratch = [Buffer(r, from_twins + nodes - 1) for r in range(n)]
        local = {r: [r - r % g + q for q in range(g) if r - r % g + q != r] for r in range(n)}
        twins = {r: [k * g + r % g for k in range(nodes) if k != r // g] for r in range(n)}
        memory = {(r, p): MemoryChannel(p, r) for r in range(n) for p in local[r]}
        port = {(r, t): PortChannel(t, r) for r in range(n) for t in twins[r]}
        results = [Rank(r).get_input_buffer() if s.inplace else Rank(r).get_output_buffer() for r in range(n)]

        def shard(buffer, local_rank: int):
            return buffer[nodes * local_rank : nodes * (local_rank + 1)]

        def piece(buffer, local_rank: int, node: int):
            return buffer[nodes * local_rank + node : nodes * local_rank + node + 1]

        for r in range(n):
            rank = Rank(r)
            source = rank.get_input_buffer()
            mine, node = r % g, r // g
            # 0. Handshake.
            channels = [memory[(r, p)] for p in local[r]] + [port[(r, t)] for t in twins[r]]
            for channel in channels:
                channel.signal(tb=0, data_sync=SyncType.none, relaxed=True)
            for channel in channels:
                channel.wait(tb=0, data_sync=SyncType.after, relaxed=True)
            summed = source  # the node's sum of shard l: the input itself with one GPU per node
            if g > 1:
                # 1. Intra-node reduce-scatter.
                for p in local[r]:
                    at = nodes * slot(p % g, mine)
                    memory[(r, p)].put(scratch[p][at : at + nodes], shard(source, p % g), tb=0)
                for p in local[r]:
                    memory[(r, p)].signal(tb=0, data_sync=SyncType.before)
                for p in local[r]:
                    memory[(r, p)].wait(tb=0, data_sync=SyncType.after)
                # 2. The node's sum of shard l.
                received = [scratch[r][nodes * slot(mine, p % g) : nodes * (slot(mine, p % g) + 1)] for p in local[r]]
                rank.reduce(shard(source, mine), received, tb=0, dst_chunk=shard(results[r], mine))
                summed = results[r]
            # 3. Reduce-scatter among the twins: twin k sums chunk k of shard l over every node.
            for t in twins[r]:
                at = from_twins + slot(t // g, node)
                port[(r, t)].put(scratch[t][at : at + 1], piece(summed, mine, t // g), tb=0)
            for t in twins[r]:
                port[(r, t)].signal(tb=0, data_sync=SyncType.before)
                port[(r, t)].flush(tb=0)
            for t in twins[r]:
                port[(r, t)].wait(tb=0, data_sync=SyncType.after)
            at = [from_twins + slot(node, t // g) for t in twins[r]]
            received = [scratch[r][a : a + 1] for a in at]
            rank.reduce(piece(summed, mine, node), received, tb=0, dst_chunk=piece(results[r], mine, node))
            # ... and the all-gather: the sum of chunk k into every twin's output.
            for t in twins[r]:
                port[(r, t)].put(piece(results[t], mine, node), piece(results[r], mine, node), tb=0)
            for t in twins[r]:
                port[(r, t)].signal(tb=0, data_sync=SyncType.before)
                port[(r, t)].flush(tb=0)
            for t in twins[r]:
                port[(r, t)].wait(tb=0, data_sync=SyncType.after)
            # 4. Intra-node all-gather.
            for p in local[r]:
                memory[(r, p)].put(shard(results[p], mine), shard(results[r], mine), tb=0)
            for p in local[r]:
                memory[(r, p)].signal(tb=0, data_sync=SyncType.before)
            for p in local[r]:
                memory[(r, p)].wait(tb=0, data_sync=SyncType.after)
    return program
