"""The runtime API over the native module: ``loom.Communicator`` and ``loom.Executor``, the plan registry
and per-call selector, what the executor learns from tensors and arrays, ranks on threads of one process
(the CPU backend), the bundled plans' installer and where ``libloom_nccl.so`` is. Imports of
``loom._native`` stay lazy, so that the compiler works without it."""
