#pragma once

// The interpreter kernels, and the table of one data type's instances (interpreter_kernels.hpp). Included
// only by the files generated from interpreter_kernels.cu.in, one per data type, so that each kernel
// instance is compiled in exactly one translation unit and nvcc compiles the types side by side.

#include <cuda_runtime.h>

#include "interpreter_kernels.hpp"
#include "device/kernel_launch_order.cuh"
#include "reduce_dispatch.hpp"

namespace loom {
namespace {  // each generated file has its own type's instances

// Three kernels per (data type, operator): the inline one for specialised programs, which travel in its
// parameters (the fast path, specialize.hpp), and the interpreter of Program's tables for the rest, in
// blocks of up to 1024 threads or of up to 512 (interpretNarrow).
// One block per multiprocessor at most (maxResidentBlocks), so each thread may use 64 registers: without
// the minimum of 1, nvcc sizes the kernel for two 1024-thread blocks per multiprocessor (32 registers)
// and the fast handlers spill.
template <typename Reduce>
__global__ void __launch_bounds__(1024, 1) interpret(const __grid_constant__ device::Program program) {
  startAfterPrecedingKernel();
  device::runBlock<Reduce>(program, blockIdx.x, threadIdx.x, blockDim.x);
}

// The interpreter of Program's tables for blocks of at most 512 threads: 128 registers per thread, so
// its generic handler takes two units per step (more reads in flight, for the bandwidth plans).
template <typename Reduce>
__global__ void __launch_bounds__(512, 1) interpretNarrow(const __grid_constant__ device::Program program) {
  startAfterPrecedingKernel();
  device::runBlock<Reduce, 2>(program, blockIdx.x, threadIdx.x, blockDim.x);
}

// The inline kernel: a specialised program that travels in its parameters (inline_program.hpp), in
// blocks of at most kMaxInlineThreads, so 128 registers per thread. __grid_constant__ lets the handlers
// read the records where they lie, in the parameter space, rather than from a per-thread copy.
template <typename Reduce>
__global__ void __launch_bounds__(device::kMaxInlineThreads, 1)
    interpretInline(const __grid_constant__ device::Program program,
                    const __grid_constant__ device::InlineProgram inlined) {
  startAfterPrecedingKernel();
  device::runInlineBlock<Reduce>(program, inlined, blockIdx.x, threadIdx.x, blockDim.x);
}

// The host-side entry points of T's kernels for `op`, which cudaLaunchKernelExC takes.
template <typename T>
InterpreterKernels interpreterKernelsFor(ReduceOp op) {
  InterpreterKernels kernels{};
  dispatchOperator<T>(op, [&]<typename Reduce>() {
    kernels.interpret = reinterpret_cast<const void*>(&interpret<Reduce>);
    kernels.narrow = reinterpret_cast<const void*>(&interpretNarrow<Reduce>);
    kernels.inlined = reinterpret_cast<const void*>(&interpretInline<Reduce>);
  });
  return kernels;
}

}  // namespace
}  // namespace loom
