"""The tools over the library and the runtime API: the ``loom`` command (``cli``), ``loom demo``
(``demo``, which compiles ``demo_allreduce``), ``loom info`` (``plan_info``) and the CUDA timing shared by
the demo and the benchmarks (``cuda_timing``)."""
