"""``loom.Communicator``: collective calls that pick a plan per call and run it.

    comm = loom.Communicator()            # from the launcher's environment (loom.launch, torchrun, ...)
    comm.all_reduce(grad)                 # in place, on the tensor's current stream
    comm.all_gather(output, shard)

Each call describes itself to the plan registry (collective, bytes, dtype, world size, ranks per node,
in place, whether a CUDA graph is being captured, root, the communicator's tags), takes the plan the
selector picks (``loom.runtime.registry``), and executes it with ``loom.Executor``. Bundled plans from
``<cache root>/default`` are registered when the communicator is created (and installed there first if
this version's are missing). Calls are enqueued on the
current stream and return at once; they work inside ``torch.cuda.graph`` capture. Every rank makes the
same calls in the same order, as with NCCL.

In place means what it means for NCCL: ``all_reduce(t)`` (without ``output=``), ``broadcast(t)`` and
``reduce(t, root)`` (without ``output=``) use one buffer; ``all_gather(output, input)`` is in place when
``input`` is this rank's slice of ``output``, and ``reduce_scatter(output, input)`` when ``output`` is this
rank's slice of ``input``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections import deque
from collections.abc import Iterable

from loom.compiler.jit_plans import choose, packet_pair_plan, plan_for_call
from loom.errors import InvalidArgumentError, LoomError, TransportError
from loom.native import native_module
from loom.plan.cache import default_plans_enabled
from loom.runtime import registry
from loom.runtime.counted import (
    device_entries,
    device_splits,
    entries_of,
    entries_pointer,
    host_splits,
    is_device_splits,
    p2p_packet_bytes,
    rows_of,
)
from loom.runtime.executor import OPS, Executor
from loom.runtime.install_plans import ensure_default_plans_installed
from loom.runtime.symmetric_window import SymmetricWindow
from loom.runtime.tensors import BufferView, buffer_view

# The bootstrap tag of the message that sets up a send/recv pair: in the range of user tags (below
# 2^56), at its top, where user traffic is unlikely to be.
POINT_TO_POINT_TAG = (1 << 56) - 0x5032

# The names of the plans this process registered from the JIT (every communicator's).
_JIT_PLANS: set[str] = set()


class Communicator:
    def __init__(
        self,
        bootstrap: object = None,
        *,
        device: int | None = None,
        host_only: bool = False,
        tags: Iterable[str] = (),
        _split_from: Communicator | None = None,
    ) -> None:
        """``bootstrap``: a ``loom._native.Bootstrap`` (default: ``Bootstrap.from_environment()``, which
        reads loom.launch, torchrun, Open MPI or Slurm variables). ``device``: this rank's CUDA device
        index; by default the current device, as with NCCL, so call ``torch.cuda.set_device(local_rank)``
        first. Two ranks on one GPU are refused, unless ``LOOM_SHARE_GPU=1`` and they are threads of one process
        (a testing mode: docs/testing.md). ``host_only``: run on host threads and host memory (the
        CPU backend) instead of a GPU. ``tags``: asked of every selection."""
        native = native_module()
        self._owns_bootstrap = bootstrap is None
        if bootstrap is None:
            bootstrap = native.Bootstrap.from_environment()
        self.bootstrap = bootstrap
        self._aborted = False
        self._async_error: TransportError | None = None  # what error() found: later calls raise it
        self.host_only = host_only
        self.native = native.Communicator(bootstrap, host_only=host_only, device=device)
        ensure_default_plans_installed()  # a fresh wheel install has them only in the package
        # Registers the bundled plans; refuses ranks sharing a GPU. A split (or send/recv pair) on its parent's
        # device shares the parent's proxy: one thread for the port channels of both.
        self.executor = Executor(self.native, share_proxy_of=_split_from.executor if _split_from else None)
        self.rank = self.native.rank
        self.world_size = self.native.world_size
        self.ranks_per_node = self.native.local_world_size
        self.tags = list(tags)
        self.parent_ranks: list[int] | None = None  # a split's members: their ranks in the parent
        self._pairs: dict[int, Communicator] = {}  # peer -> the two-rank communicator of send/recv
        self._sends_to_self: deque[tuple[BufferView, object]] = deque()  # (view, tensor) until recv takes it
        self._jit_agreed: set[str] = set()  # the JIT plans every rank of this communicator took from rank 0
        self._counted_entries: object = None  # the last all-to-all-v's device entries, until its kernel reads them
        self._packet_bytes: int | None = None  # LOOM_P2P_PACKET_BYTES, read at the first send/recv

    def split(self, color: int | None, key: int | None = None) -> Communicator | None:
        """Like ``ncclCommSplit`` (and ``MPI_Comm_split``): collective over every rank of this communicator.
        Ranks that pass one ``color`` (0 or more) form a new communicator, ranked by ``key`` (default: this
        rank) and then by their rank here; ``color=None`` (or -1, NCCL_SPLIT_NOCOLOR) joins none and gets
        None. The new communicator picks plans by its own size and ranks per node, connects its members only,
        runs on this rank's device, and has a bootstrap of its own: either one may be aborted first.
        ``parent_ranks`` lists its members' ranks here."""
        self._check_not_aborted()
        color = -1 if color is None else color
        key = self.rank if key is None else key
        for name, value in (("color", color), ("key", key)):
            if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
                raise InvalidArgumentError(f"{name}: expected a 32-bit integer, got {value!r}")
        found = native_module().split_bootstrap(self.bootstrap, color, key)
        if found is None:
            return None
        bootstrap, parent_ranks = found
        device = None if self.host_only else self.native.cuda_device
        child = Communicator(bootstrap, device=device, host_only=self.host_only, tags=self.tags, _split_from=self)
        child._owns_bootstrap = True  # made here: abort() closes it
        child.parent_ranks = list(parent_ranks)
        return child

    @property
    def on_gpu(self) -> bool:
        return self.executor.on_gpu

    def abort(self, wait_s: float = 5.0) -> bool:
        """Like ``ncclCommAbort``: returns within about ``wait_s`` even when a peer is dead or a call is in
        flight on another thread (which then raises), and frees what the communicator holds: plans, channels,
        shared memory, threads, and the bootstrap's connections when it made the bootstrap itself. Returns
        False when a call in flight did not end within ``wait_s`` (its resources go when it returns). Every
        later call raises; a communicator whose call timed out must be aborted and created anew."""
        if self._aborted:
            return True
        self._aborted = True
        ended = self.executor.abort(wait_s)
        for pair in self._pairs.values():
            ended = pair.abort(wait_s) and ended
        self._pairs.clear()
        self.executor = self.native = None
        if self._owns_bootstrap:
            self.bootstrap.close()
        return ended

    def error(self) -> TransportError | None:
        """Like ``ncclCommGetAsyncError``, for a watchdog thread while calls run on another: a TransportError
        saying why this communicator can no longer be used (an earlier call failed, or a rank's process is gone:
        it closed its bootstrap connection to this rank without the goodbye a closing bootstrap says, seen at
        the next question, and only for ranks this rank has talked to), else None. After an error, abort() and
        create a new communicator."""
        if self._aborted:
            return TransportError(f"communicator of rank {self.rank}: it was aborted")
        executor = self.executor
        if executor is None or self._async_error is not None:
            return self._async_error
        reasons = [text for text in [executor.async_error()] if text]
        for peer, pair in list(self._pairs.items()):
            if (error := pair.error()) is not None:
                reasons.append(f"pair with rank {peer}: {error}")
        if reasons:
            # As the library after ncclCommGetAsyncError's error: later calls are refused at once.
            self._async_error = TransportError("; ".join(reasons))
        return self._async_error

    def _check_not_aborted(self) -> None:
        if self._aborted:
            raise InvalidArgumentError(f"communicator of rank {self.rank}: it was aborted; create a new one")
        if self._async_error is not None:
            raise TransportError(
                f"communicator of rank {self.rank}: error() reported: {self._async_error} (it must be aborted and"
                " created anew)"
            )

    def register(self, tensor: object) -> SymmetricWindow:
        """Collective, like ``ncclCommWindowRegister`` with ``NCCL_WIN_COLL_SYMMETRIC``: every rank registers a
        tensor of the same bytes at the same call. Calls whose buffers lie in registered tensors, at the same
        offsets on every rank, then exchange no addresses (a plan's first call on them still sets up). Returns
        a ``SymmetricWindow``; ``close()`` it (or use ``with``) before the tensor is freed."""
        self._check_not_aborted()
        return SymmetricWindow(self.executor, tensor, self.executor.register_window(tensor))

    def all_reduce(self, tensor: object, op: str = "sum", *, output: object = None, stream: object = None) -> None:
        """Reduce ``tensor`` over all ranks, in place, or into ``output`` (NCCL's sendbuff/recvbuff)."""
        source = buffer_view(tensor, "tensor")
        target = source if output is None else buffer_view(output, "output")
        self._run("allreduce", target, source, op, stream, inplace=source.pointer == target.pointer)

    def all_gather(self, output: object, input: object, *, stream: object = None) -> None:
        source, target = buffer_view(input, "input"), buffer_view(output, "output")
        inplace = source.pointer == target.pointer + self.rank * source.nbytes
        self._run("allgather", target, source, "sum", stream, inplace=inplace)

    def reduce_scatter(self, output: object, input: object, op: str = "sum", *, stream: object = None) -> None:
        source, target = buffer_view(input, "input"), buffer_view(output, "output")
        inplace = target.pointer == source.pointer + self.rank * target.nbytes
        self._run("reducescatter", target, source, op, stream, inplace=inplace)

    def all_to_all(
        self,
        output: object,
        input: object,
        *,
        output_splits: object = None,
        input_splits: object = None,
        stream: object = None,
    ) -> None:
        """Rank r's p-th piece of ``input`` goes to rank p, which gets it as its r-th piece of ``output``. Without
        splits the pieces are equal; with ``input_splits`` and ``output_splits`` (either may be None: equal
        pieces) they are row counts of dimension 0 per rank, as torch's ``all_to_all_single`` takes them
        (all-to-all-v), laid out back to back, and rank p's ``output_splits[r]`` must equal rank r's
        ``input_splits[p]``. Splits as lists (or host arrays) are read now; as CUDA tensors they stay on the
        device, and a CUDA graph replays with whatever they hold then. Bytes go straight into each
        receiver's output; with splits the call runs out of place."""
        source, target = buffer_view(input, "input"), buffer_view(output, "output")
        if output_splits is None and input_splits is None:
            self._run("alltoall", target, source, "sum", stream, inplace=source.pointer == target.pointer)
            return
        self._all_to_all_v(target, source, output_splits, input_splits, stream)

    def _all_to_all_v(
        self, target: BufferView, source: BufferView, output_splits: object, input_splits: object, stream: object
    ) -> None:
        self._check_not_aborted()
        handle = self.executor.stream_for(stream, [source, target])
        world = self.world_size
        in_rows, in_row_bytes = rows_of(source.owner, source.nbytes, "input")
        out_rows, out_row_bytes = rows_of(target.owner, target.nbytes, "output")
        sends: list[tuple[int, int]] = []
        receives: list[tuple[int, int]] = []
        entries = None
        if is_device_splits(input_splits) or is_device_splits(output_splits):
            import torch

            send_splits = device_splits(input_splits, world, in_rows, "input_splits", source.owner)
            receive_splits = device_splits(output_splits, world, out_rows, "output_splits", source.owner)
            with torch.cuda.stream(torch.cuda.ExternalStream(handle)):
                entries = device_entries(send_splits, receive_splits, in_row_bytes, out_row_bytes)
            message_bytes = source.nbytes  # the largest entry is not known on the host
        else:
            sends = entries_of(host_splits(input_splits, world, in_rows, "input_splits"), in_row_bytes)
            receives = entries_of(host_splits(output_splits, world, out_rows, "output_splits"), out_row_bytes)
            message_bytes = max(bytes for _, bytes in sends + receives)
        if world == 1:
            # A job of one rank: its one entry to itself, copied.
            if entries is not None:
                raise InvalidArgumentError("input_splits: a job of one rank takes its splits as lists")
            (offset, nbytes), (at, _) = sends[0], receives[0]
            self.executor.copy_views(_part(source, offset, nbytes), _part(target, at, nbytes), handle)
            return
        plan = self._select(
            "alltoallv", message_bytes, source.dtype, False, self.executor.capturing(handle), None, "sum"
        )
        if plan is None:
            raise InvalidArgumentError(
                f"input_splits: no all-to-all-v plan runs on {world} ranks, {self.ranks_per_node} per node"
                " (alltoallv_fullmesh runs 2 to 8 ranks on one node, or nodes of 1 to 8; with LOOM_DEFAULT_PLANS=0 only"
                " your own plans run)"
            )
        pointer = 0 if entries is None else entries_pointer(entries, world, self.executor.on_gpu)
        self._counted_entries = entries  # read by the kernel after this returns (stream-ordered)
        self.executor.execute_counted_views(plan, source, target, sends, receives, pointer, handle)

    def broadcast(self, tensor: object, root: int = 0, *, stream: object = None) -> None:
        if not isinstance(root, int) or not 0 <= root < self.world_size:
            raise InvalidArgumentError(f"root: expected a rank from 0 to {self.world_size - 1}, got {root!r}")
        view = buffer_view(tensor, "tensor")
        self._run("broadcast", view, view, "sum", stream, inplace=True, root=root)

    def reduce(
        self, tensor: object, root: int = 0, op: str = "sum", *, output: object = None, stream: object = None
    ) -> None:
        """Reduce ``tensor`` over all ranks into the root's ``output`` (default: ``tensor`` itself, in place), as
        NCCL's ncclReduce: only the root's output is written; other ranks' ``output`` is ignored. Every rank runs
        one in-place plan (a non-root rank cannot know whether the root's output is its input), so an
        out-of-place root first copies ``tensor`` into ``output`` on the call's stream."""
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < self.world_size:
            raise InvalidArgumentError(f"root: expected a rank from 0 to {self.world_size - 1}, got {root!r}")
        source = buffer_view(tensor, "tensor")
        view = source
        if self.rank == root and output is not None:
            view = buffer_view(output, "output")
            if view.nbytes != source.nbytes or view.dtype != source.dtype:
                raise InvalidArgumentError(
                    f"output: expected {source.nbytes} bytes of {source.dtype} like the tensor,"
                    f" got {view.nbytes} bytes of {view.dtype}"
                )
            if op not in OPS:
                raise InvalidArgumentError(f"op: expected one of {', '.join(OPS)}, got {op!r}")
            self.executor.copy_views(source, view, self.executor.stream_for(stream, [source, view]))
        self._run("reduce", view, view, op, stream, inplace=True, root=root)

    def send(self, tensor: object, peer: int, *, stream: object = None) -> None:
        """Send ``tensor`` to ``peer``, which calls ``recv`` with a buffer of the same size. Only the two ranks
        take part; between them, sends and receives pair up in the order they are called, as with NCCL.
        The first call between two ranks sets up their connection (outside CUDA graph capture). A send to
        this rank itself waits for its ``recv``, which copies from ``tensor``: keep it alive until then."""
        self._point_to_point(tensor, peer, sending=True, stream=stream)

    def recv(self, tensor: object, peer: int, *, stream: object = None) -> None:
        """Receive into ``tensor`` what ``peer`` sends with ``send``."""
        self._point_to_point(tensor, peer, sending=False, stream=stream)

    def _point_to_point(self, tensor: object, peer: int, *, sending: bool, stream: object) -> None:
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < self.world_size:
            raise InvalidArgumentError(f"peer: expected a rank from 0 to {self.world_size - 1}, got {peer!r}")
        self._check_not_aborted()
        if peer == self.rank:
            self._to_self(tensor, sending=sending, stream=stream)
            return
        pair = self if self.world_size == 2 else self._pair_with(peer)
        pair._message(buffer_view(tensor, "tensor"), sending=sending, stream=stream)

    def _message(self, view: BufferView, *, sending: bool, stream: object) -> None:
        """One send or receive on a two-rank communicator: a counted call (an all-to-all-v plan of the two)
        whose one entry is the message, straight from the sender's buffer into the receiver's; the peer's call
        carries the other end. On two nodes the plan runs over a port channel."""
        self._check_not_aborted()
        handle = self.executor.stream_for(stream, [view])
        if self._packet_bytes is None:  # read once, at the first message (a bad value is this call's error)
            self._packet_bytes = p2p_packet_bytes()
        packets = self._packet_bytes
        if packets and self.ranks_per_node == 2 and view.nbytes <= packets:
            plan = _packet_plan(packets)  # both ends know the message's size, so both pick this plan
        else:
            plan = self._select(
                "alltoallv", view.nbytes, view.dtype, False, self.executor.capturing(handle), None, "sum"
            )
        if plan is None:
            raise InvalidArgumentError(
                f"peer: no all-to-all-v plan runs between these two ranks ({self.ranks_per_node} per node)"
            )
        none = [(0, 0), (0, 0)]
        message = list(none)
        message[1 - self.rank] = (0, view.nbytes)
        nothing = _part(view, 0, 0)  # the side that moves nothing: a stand-in takes its place
        if sending:
            self.executor.execute_counted_views(plan, view, nothing, message, none, 0, handle)
        else:
            self.executor.execute_counted_views(plan, nothing, view, none, message, 0, handle)

    def _to_self(self, tensor: object, *, sending: bool, stream: object) -> None:
        """Send/recv of a rank with itself, as NCCL pairs them in a group: the send is held, in order, until
        a recv takes it and copies it on the recv's stream."""
        view = buffer_view(tensor, "tensor")
        if sending:
            self.executor.stream_for(stream, [view])  # the stream argument is checked at the call it belongs to
            self._sends_to_self.append((view, tensor))
            return
        if not self._sends_to_self:
            raise InvalidArgumentError(
                f"peer: recv from rank {self.rank} itself needs a send to itself first (none is pending)"
            )
        source, _ = self._sends_to_self.popleft()
        self.executor.copy_views(source, view, self.executor.stream_for(stream, [source, view]))

    def _pair_with(self, peer: int) -> Communicator:
        """The two-rank communicator of this rank and ``peer``, set up by their first send/recv (like
        NCCL's lazy point-to-point connections): only the two ranks take part, over the job's bootstrap."""
        pair = self._pairs.get(peer)
        if pair is not None:
            return pair
        native = native_module()
        first = self.rank < peer  # the lower rank listens and is rank 0 of the pair
        if first:
            host = self.bootstrap.peer_address(self.rank).rsplit(":", 1)[0].strip("[]")
            uid = native.UniqueId.create(host)
            self.bootstrap.send(peer, POINT_TO_POINT_TAG, uid.to_bytes())
        else:
            uid = native.UniqueId.from_bytes(self.bootstrap.recv(peer, POINT_TO_POINT_TAG))
        joined = native.Bootstrap(0 if first else 1, 2, uid, timeout_ms=self.bootstrap.timeout_ms)
        device = None if self.host_only else self.native.cuda_device
        pair = Communicator(joined, device=device, host_only=self.host_only, tags=self.tags, _split_from=self)
        self._pairs[peer] = pair
        return pair

    def _jit_plan(self, collective: str, message_bytes: int, inplace: bool, root: int | None) -> object | None:
        """A shape with no registered plan for the call (3, 5, 6 ranks, ...): the library algorithm the bundled
        set's rule picks, compiled on first use (loom.compiler.jit_plans) and registered for the sizes it
        serves. Rank 0 compiles; every rank takes its text over the bootstrap (every rank makes this call at
        the same point), so all run one plan, and a compile error is the same error on every rank."""
        if not default_plans_enabled():
            return None  # LOOM_DEFAULT_PLANS=0: the user's plans only, none of Loom's own
        choice = choose(collective, self.world_size, self.ranks_per_node, message_bytes)
        if choice is None:
            return None
        # Tagged with what it is and for which call (the table's row: ranks of a counted call have sizes of
        # their own): a rank at another exchange (another root, a call this rank skipped) is named, never
        # read as a plan.
        sizes = f"{choice.min_bytes} to {choice.max_bytes} bytes"
        call = f"{collective} of {sizes}, {'in place' if inplace else 'out of place'}, root {root}"
        header = f"loom JIT plan for {call}\n".encode()
        body = b""
        if self.rank == 0:
            try:
                found = plan_for_call(
                    collective,
                    world_size=self.world_size,
                    ranks_per_node=self.ranks_per_node,
                    message_bytes=message_bytes,
                    inplace=inplace,
                    root=root,
                    max_thread_blocks=_blocks_per_rank(self.executor.placement),
                )
                body = b"P" + found.text.encode()
            except LoomError as error:
                body = b"E" + str(error).encode()
            except Exception as error:  # noqa: BLE001 - whatever fails here must reach every rank, not hang them
                body = b"E" + f"{type(error).__name__}: {error}".encode()
        sent = _from_rank_zero(self.bootstrap.all_gather(header + body), header, self.rank, call)
        if sent[:1] == b"E":
            raise LoomError(f"rank 0 could not compile a plan for this call: {sent[1:].decode()} ({call})")
        plan = native_module().Plan.parse(sent[1:].decode())
        registry.register_plan(plan, replace=True)  # ranks that are threads of one process share the registry
        _JIT_PLANS.add(plan.name)
        self._jit_agreed.add(plan.name)
        return plan

    def _select(
        self,
        collective: str,
        message_bytes: int,
        dtype: str,
        inplace: bool,
        capturing: bool,
        root: int | None,
        op: str,
    ) -> object | None:
        """The registered plan the selector picks for the call among those whose thread blocks fit this rank's
        placement, else a JIT plan for it (with fewer instances where the bundled choice does not fit), else
        None."""
        args = (collective, message_bytes, dtype, self.world_size, self.ranks_per_node)
        placement = self.executor.placement
        plan = native_module().registry_select(*args, inplace, capturing, root, self.tags, op, placement)
        # A JIT plan another communicator of this process registered is agreed on here too before it runs:
        # ranks of this one in other processes may not have it, and they come to the exchange.
        unagreed = plan is not None and plan.name in _JIT_PLANS and plan.name not in self._jit_agreed
        if (plan is None or unagreed) and self.world_size > 1 and op == "sum":
            if self._jit_plan(collective, message_bytes, inplace, root) is not None:
                # Selected like any registered plan: a custom selector may still refuse it.
                plan = native_module().registry_select(*args, inplace, capturing, root, self.tags, op, placement)
        return plan

    def _run(
        self,
        collective: str,
        target: BufferView,
        source: BufferView,
        op: str,
        stream: object,
        *,
        inplace: bool,
        root: int | None = None,
    ) -> None:
        self._check_not_aborted()
        handle = self.executor.stream_for(stream, [source, target])
        if op not in OPS:
            raise InvalidArgumentError(f"op: expected one of {', '.join(OPS)}, got {op!r}")
        if source.nbytes == 0 and target.nbytes == 0:
            return  # nothing to move, as NCCL returns at once for a count of 0
        capturing = self.executor.capturing(handle)
        args = (collective, source.nbytes, source.dtype, self.world_size, self.ranks_per_node)
        plan = self._select(collective, source.nbytes, source.dtype, inplace, capturing, root, op)
        if plan is not None:
            self.executor.execute_views(plan, source, target, op, handle)
            return
        if self.world_size == 1:
            # A job of one rank has nothing to exchange: NCCL copies the input to the output, if anywhere.
            self.executor.copy_views(source, target, handle)
            return
        fallback = registry.fallback()
        if fallback is None:
            native_module().registry_select_or_raise(
                *args, inplace, capturing, root, self.tags, op, self.executor.placement
            )  # raises
        request = types.SimpleNamespace(
            collective=collective,
            message_bytes=source.nbytes,
            dtype=source.dtype,
            world_size=self.world_size,
            ranks_per_node=self.ranks_per_node,
            inplace=inplace,
            capturing=capturing,
            root=root,
            tags=list(self.tags),
            op=op,
        )
        fallback(request, target.owner, source.owner)


def _from_rank_zero(everyone: list[bytes], header: bytes, rank: int, call: str) -> bytes:
    """Rank 0's part of a tagged exchange; ``ranks disagree`` naming each rank at another exchange."""
    differing = []
    for other, message in enumerate(everyone):
        if not message.startswith(header):
            theirs = message.split(b"\n", 1)[0] if message.startswith(b"loom ") else b"another exchange"
            differing.append(f"rank {other} is at {theirs.decode(errors='replace')[:200]}")
    if differing:
        raise LoomError(
            f"ranks disagree: rank {rank} asks for a JIT plan for {call}; {'; '.join(differing)} (every rank must"
            " make the same collective calls in the same order, with the same root)"
        )
    return everyone[0][len(header) :]


def _blocks_per_rank(placement: tuple[int, int]) -> int | None:
    """The most thread blocks a rank's plan may have at ``placement`` (Executor.placement); None: no limit."""
    ranks_sharing, resident_blocks = placement
    return None if resident_blocks >= 0xFFFFFFFF else resident_blocks // max(ranks_sharing, 1)


@functools.cache
def _packet_plan(capacity: int) -> object:
    """The eager packet plan of a pair for messages of up to ``capacity`` bytes (LOOM_P2P_PACKET_BYTES),
    compiled once per process and cached by content hash."""
    return native_module().Plan.parse(packet_pair_plan(capacity).text)


def _part(view: BufferView, offset: int, nbytes: int) -> BufferView:
    """Bytes [offset, offset + nbytes) of ``view``."""
    return dataclasses.replace(view, pointer=view.pointer + offset, nbytes=nbytes)
