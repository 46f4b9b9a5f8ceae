"""``loom.Executor``: run a plan on torch tensors, CuPy or NumPy arrays (anything with DLPack or an
array interface).

    executor = loom.Executor(communicator)          # a loom._native.Communicator
    executor.execute(plan, input, output, op="sum")  # on the current stream of the tensors

On a GPU communicator the call is enqueued on ``stream`` (default: the current stream of the tensors'
framework) and returns at once; on a host-only communicator (the CPU backend) it runs on host threads
and returns when this rank's part is done. Every rank calls ``execute`` with the same plan and the same
message size. Buffers are used in place, never copied: a non-contiguous tensor is an error.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from loom.errors import InvalidArgumentError
from loom.native import native_module
from loom.runtime.counted import entries_pointer
from loom.runtime.proven_plans import allow_unproven, require_proven
from loom.runtime.tensors import BufferView, buffer_view, stream_handle, writable

OPS = ("sum", "min", "max")


class Executor:
    def __init__(self, communicator: object, *, share_proxy_of: Executor | None = None, verified: bool = True) -> None:
        """``share_proxy_of``: the executor of the communicator this one was split from; on the same device
        both use one proxy thread for their port channels. ``verified``: a plan given to ``execute`` runs only
        when proven (its certificate, or the verifier passes it the first time; VerificationError otherwise);
        ``False`` runs plans unproven, with a warning once per plan."""
        native = native_module()
        if not isinstance(communicator, native.Communicator):
            raise InvalidArgumentError(
                f"communicator: expected a loom._native.Communicator, got {type(communicator).__name__}"
            )
        self.communicator = communicator
        self._native = native.Executor(communicator, share_proxy_of._native if share_proxy_of else None)
        self._plans: dict[str, object] = {}
        self._verified = verified
        # Fixed for the communicator, and asked on every call (each a call into the native layer otherwise).
        self._cuda_device = communicator.cuda_device
        self._on_gpu = self._native.on_gpu

    @property
    def on_gpu(self) -> bool:
        return self._on_gpu

    @property
    def placement(self) -> tuple[int, int]:
        """Where this rank's plans run, for selection: (ranks sharing its GPU, interpreter blocks the GPU holds
        at once). A plan fits when its busiest rank's thread blocks times the first are at most the second."""
        return tuple(self._native.placement)

    @property
    def tuned_machine(self) -> dict:
        """This machine as a tuned table names it (backend, gpu, gpus, world_size, ranks_per_node): the table
        ``loom tune`` writes for this communicator's shape, and the one its executor loads."""
        return dict(self._native.tuned_machine)

    def abort(self, wait_s: float = 5.0) -> bool:
        """Like ``ncclCommAbort``: end a call in flight on another thread (on the CPU backend within about
        100 ms) and free the plans' channels, scratch and contexts without waiting for peers, which may be
        dead. Returns False when the call in flight did not return within ``wait_s``. Later calls raise."""
        return self._native.abort(int(wait_s * 1000))

    def async_error(self) -> str | None:
        """Why the communicator can no longer be used (an earlier call's failure, or ranks whose process is
        gone), without waiting for a call in flight on another thread; None when nothing is known."""
        return self._native.async_error()

    def stats(self) -> dict:
        """Plans and contexts built, launches made: a second call with the same size and buffers builds nothing."""
        return self._native.stats()

    def execute(self, plan: object, input: object, output: object, op: str = "sum", stream: object = None) -> None:
        """One collective call of ``plan`` (a loom.Plan or a plan file path) from ``input`` into ``output``."""
        source = buffer_view(input, "input")
        target = buffer_view(output, "output")
        self.execute_views(self._plan(plan), source, target, op, self.stream_for(stream, [source, target]))

    def execute_views(self, plan: object, source: BufferView, target: BufferView, op: str, stream: int) -> None:
        """``execute`` for callers that have the buffer views and the stream handle already (loom.Communicator)."""
        if op not in OPS:
            raise InvalidArgumentError(f"op: expected one of {', '.join(OPS)}, got {op!r}")
        self._check(plan, source, target)
        self._native.execute(plan, source.pointer, target.pointer, source.nbytes, source.dtype, op, stream)

    def execute_counted(
        self,
        plan: object,
        input: object,
        output: object,
        *,
        sends: list[tuple[int, int]] | None = None,
        receives: list[tuple[int, int]] | None = None,
        entries: object = None,
        stream: object = None,
    ) -> None:
        """One call of a counted plan (collective ``alltoallv``): ``sends[p]`` is the (byte offset, bytes) this
        rank sends to rank p out of ``input``, ``receives[q]`` where in ``output`` what rank q sends lands; or
        ``entries``, a (2 x world size, 2) int64 table of both (sends, then receives) that the kernel reads
        when it runs: a CUDA tensor (a NumPy array on the CPU backend) whose contents may change between
        CUDA graph replays. Every rank calls with the same plan; a send and its receive have equal bytes."""
        source = buffer_view(input, "input")
        target = buffer_view(output, "output")
        handle = self.stream_for(stream, [source, target])
        pointer = 0 if entries is None else entries_pointer(entries, self.communicator.world_size, self._on_gpu)
        self.execute_counted_views(self._plan(plan), source, target, sends or [], receives or [], pointer, handle)

    def execute_counted_views(
        self,
        plan: object,
        source: BufferView,
        target: BufferView,
        sends: list[tuple[int, int]],
        receives: list[tuple[int, int]],
        entries: int,
        stream: int,
    ) -> None:
        """``execute_counted`` with buffer views, plain entry lists and the table's address (0: none)."""
        self._check_views(source, target, None, lambda: "")
        self._native.execute_counted(
            plan, source.pointer, source.nbytes, target.pointer, target.nbytes, sends, receives, entries, stream
        )

    def register_window(self, buffer: object) -> int:
        """Collective: ``buffer`` (a tensor or array) becomes a symmetric window of this rank; every rank
        registers one of the same bytes at the same call. Returns its handle, the same on every rank."""
        view = writable(buffer_view(buffer, "buffer"))  # peers write into a window
        self._check_device("buffer", view)
        return self._native.register_window(view.pointer, view.nbytes)

    def deregister_window(self, handle: int) -> None:
        """Collective: waits for the calls in flight, drops what was set up on the window and forgets it."""
        self._native.deregister_window(handle)

    def copy_views(self, source: BufferView, target: BufferView, stream: int) -> None:
        """A copy between this rank's buffers, as NCCL runs every collective of a job of one rank and a send
        to itself: nothing to move when ``source`` is ``target``, else a copy on ``stream``."""
        self._check_views(source, target, source.nbytes, lambda: f"a local copy of {source.nbytes} bytes")
        self._native.copy_local(source.pointer, target.pointer, source.nbytes, stream)

    def stream_for(self, stream: object, views: list[BufferView]) -> int:
        """The cudaStream_t handle a call runs on (see loom.runtime.tensors.stream_handle); 0 on the CPU backend."""
        return stream_handle(stream, views) if self.on_gpu else self._no_stream(stream)

    def capturing(self, stream: int) -> bool:
        """Whether a CUDA graph is being captured on ``stream`` (a handle from ``stream_for``)."""
        return self.on_gpu and self._native.capturing(stream)

    def _plan(self, plan: object) -> object:
        """The loom.Plan to run, proven (proven_plans.py) unless this executor was made with ``verified=False``."""
        native = native_module()
        if isinstance(plan, (str, os.PathLike)):
            path = os.fspath(plan)
            if path not in self._plans:
                self._plans[path] = native.Plan.load(path)
            plan, origin = self._plans[path], path
        elif isinstance(plan, native.Plan):
            origin = f"loom.Executor.execute({plan.name!r})"
        else:
            raise InvalidArgumentError(f"plan: expected a loom.Plan or a plan file path, got {type(plan).__name__}")
        if self._verified:
            require_proven(plan, origin)
        else:
            allow_unproven(plan, "loom.Executor(..., verified=False)")
        return plan

    def _check(self, plan: object, source: BufferView, target: BufferView) -> None:
        _, output_bytes = native_module().plan_buffer_bytes(plan, source.nbytes)
        self._check_views(
            source,
            target,
            output_bytes,
            lambda: f"the {plan.collective} of {source.nbytes}-byte inputs over {plan.world_size} ranks",
        )

    def _check_views(
        self, source: BufferView, target: BufferView, output_bytes: int | None, call: Callable[[], str]
    ) -> None:
        """``call()`` names the call in an error (made only then: this runs on every call). ``output_bytes``:
        what the call writes (None: a counted call, whose entries say)."""
        if source.dtype != target.dtype:
            raise InvalidArgumentError(f"output: dtype {target.dtype} differs from the input's {source.dtype}")
        if output_bytes is not None and target.nbytes != output_bytes:
            raise InvalidArgumentError(f"output: holds {target.nbytes} bytes, but {call()} writes {output_bytes}")
        self._check_device("input", source)
        self._check_device("output", target)
        writable(target)

    def _check_device(self, name: str, view: BufferView) -> None:
        on_gpu = self._on_gpu
        if view.device != ("cuda" if on_gpu else "cpu"):
            where = "a GPU" if on_gpu else "host threads (a host-only communicator)"
            raise InvalidArgumentError(f"{name}: lives on {view.device}, but this executor runs on {where}")
        device = self._cuda_device
        if on_gpu and view.device_index is not None and view.device_index != device:
            raise InvalidArgumentError(f"{name}: is on cuda:{view.device_index}; the communicator uses cuda:{device}")

    @staticmethod
    def _no_stream(stream: object) -> int:
        if stream not in (None, 0):
            raise InvalidArgumentError("stream: the CPU backend runs on host threads and takes no stream")
        return 0
