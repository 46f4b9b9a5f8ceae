#pragma once

// Device-side headers are plain C++ headers that nvcc and the host compiler both read: handles are
// built on the host and used in kernels, and the CPU backend runs the same host-device functions
// on host threads.

#if defined(__CUDACC__)
#define LOOM_HOST_DEVICE __host__ __device__ __forceinline__
#define LOOM_DEVICE __device__ __forceinline__
// A rarely taken path kept out of line, so that its registers do not weigh on the hot code's.
// (inline: one definition across translation units, as a header function needs; __noinline__ still holds)
#define LOOM_HOST_DEVICE_COLD inline __host__ __device__ __noinline__
#else
#define LOOM_HOST_DEVICE inline
#define LOOM_DEVICE inline
#define LOOM_HOST_DEVICE_COLD inline
#endif

// True in the device pass of nvcc, where PTX and CUDA atomics are available.
#if defined(__CUDA_ARCH__)
#define LOOM_DEVICE_PASS 1
#else
#define LOOM_DEVICE_PASS 0
#endif

// Unrolls the loop that follows in nvcc (the host compiler decides for itself): loops over a fixed
// number of operands unroll so that their arrays stay in registers.
#if defined(__CUDACC__)
#define LOOM_UNROLL _Pragma("unroll")
#else
#define LOOM_UNROLL
#endif
