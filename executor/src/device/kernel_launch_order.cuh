#pragma once

// The order of a stream's kernels under programmatic dependent launch: every Loom kernel starts with
// startAfterPrecedingKernel().

namespace loom {

// Programmatic dependent launch (Hopper on): a kernel launched with programmatic stream serialisation
// may be scheduled while the kernel before it on the stream still runs, so its launch latency hides
// behind that kernel's tail (in a CUDA graph of back-to-back calls, most of the gap between them). It
// must wait for that kernel's completion, and see its memory, before reading anything: inputs, and the
// call counts the previous call of the same plan wrote. Without the launch attribute both are no-ops.
__device__ __forceinline__ void waitForPrecedingKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel of the stream be scheduled now, once this one may start its work. Only after
// waitForPrecedingKernel: at most two kernels of a stream are resident, this one and the next, which
// waits, so a graph of many calls does not fill the GPU with waiting blocks.
__device__ __forceinline__ void letNextKernelLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

__device__ __forceinline__ void startAfterPrecedingKernel() {
  waitForPrecedingKernel();
  letNextKernelLaunch();
}

}  // namespace loom
