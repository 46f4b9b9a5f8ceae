"""All-to-all over port channels, simple protocol: for large messages (1 MiB to 1 GiB per rank by
default).

The input and output are cut into world_size pieces; rank q's output piece r receives rank r's input
piece q. On one host a port channel's put is a copy-engine copy that the host proxy issues, so the
pieces cross NVLink without the SMs (and the executor then needs CUDA_MODULE_LOADING=EAGER:
docs/executor.md). The pieces go in steps of ``peers_per_step`` peers: in the step of k rank r puts
its piece for ``r + k`` and waits for the piece of ``r - k``, which that rank put in the same step;
one peer per step (the default) is a permutation at every moment, all world_size - 1 at once is a
mesh. On 4 H100s, timed per GPU, the copy engines moved 370 GB/s either way (bench/nvlink_ceiling.py).
After the last step every channel is flushed (the copies have read the input).

Out of place the own piece is copied locally by ``copy_blocks`` thread blocks meanwhile (a piece is
cut into that many chunks). In place the input is the output and piece p may not be overwritten while
the copy engine still reads it for rank p, so the pieces land in the receiver's scratch and the
copy blocks move them into place after the flushes (a barrier orders them after thread block 0).

Layout: thread block 0 runs the handshake, the puts, signals, waits and flushes; thread blocks 1 ..
copy_blocks copy. ``instances`` runs independent sequences on parts of every piece (with their own
channels, so their copies run on separate copy-engine streams).

Parameters: ``world_size`` 2 to 8 on one node; ``instances``, ``inplace``, ``name``; options
``copy_blocks`` (1 to 32, default 8), ``peers_per_step`` (1 to world_size - 1, default 1),
``min_message_size``, ``max_message_size``, ``num_threads_per_block``.
"""

from __future__ import annotations

from typing import Any

from loom.algorithms._common import check_int_option, setup, slot
from loom.language import AllToAll, Buffer, CollectiveProgram, PortChannel, Rank, SyncType

NAME = "alltoall_port"


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
    n = s.world_size
    c = check_int_option(s, "copy_blocks", 1, 32)
    per_step = check_int_option(s, "peers_per_step", 1, n - 1)
    program = CollectiveProgram(s.name, AllToAll(n, c, s.inplace), n, **s.program_args())
    s.annotate(program)
    with program:
        scratch = [Buffer(r, (n - 1) * c) for r in range(n)] if s.inplace else None
        channels = {(r, p): PortChannel(p, r) for r in range(n) for p in range(n) if p != r}

        def piece(buffer, index: int):
            return buffer[index * c : (index + 1) * c]

        for r in range(n):
            rank = Rank(r)
            source, output = rank.get_input_buffer(), rank.get_output_buffer()
            for k in range(1, n):
                channels[(r, (r + k) % n)].signal(tb=0, data_sync=SyncType.none, relaxed=True)
            for k in range(1, n):
                channels[(r, (r + k) % n)].wait(tb=0, data_sync=SyncType.after, relaxed=True)
            if not s.inplace:  # in place, the own piece already is where it belongs
                for j in range(c):
                    at = r * c + j
                    rank.copy(output[at : at + 1], source[at : at + 1], tb=1 + j)
            for first in range(1, n, per_step):
                step = range(first, min(first + per_step, n))
                for k in step:
                    to = (r + k) % n
                    if s.inplace:
                        landing = piece(scratch[to], slot(to, r))
                    else:
                        landing = piece(Rank(to).get_output_buffer(), r)
                    channels[(r, to)].put(landing, piece(source, to), tb=0)
                    channels[(r, to)].signal(tb=0, data_sync=SyncType.before)
                for k in step:
                    channels[(r, (r - k) % n)].wait(tb=0, data_sync=SyncType.after)
            for k in range(1, n):
                channels[(r, (r + k) % n)].flush(tb=0)
            if s.inplace:
                rank.barrier(list(range(c + 1)))
                for p in range(n):
                    if p == r:
                        continue
                    for j in range(c):
                        at = slot(r, p) * c + j
                        rank.copy(output[p * c + j : p * c + j + 1], scratch[r][at : at + 1], tb=1 + j)
    return program
