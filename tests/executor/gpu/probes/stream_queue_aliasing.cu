// Probe (run by hand: nvcc -O2 -o probe stream_queue_aliasing.cu && CUDA_DEVICE_MAX_CONNECTIONS=8 ./probe 64 0):
// does a stream created after N others share a hardware work queue with one of them, so that a copy or a
// kernel on it waits behind that stream's blocked queue (a spinning kernel followed by another)?
// On an H100 with driver 580 (2026-11-25): no, at 8 and 32 connections (docs/testing.md).
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cuda_runtime.h>
__global__ void spin(volatile int* flag) { while (*flag == 0) {} }
__global__ void noop() {}
int main(int argc, char** argv) {
  const int pool = argc > 1 ? atoi(argv[1]) : 64;
  const int priority = argc > 2 ? atoi(argv[2]) : 0;
  int* flag; cudaHostAlloc(&flag, 4, cudaHostAllocMapped);
  int* dflag; cudaHostGetDevicePointer(&dflag, flag, 0);
  int* dev; cudaMalloc(&dev, 4); int host = 1;
  cudaStream_t* s = new cudaStream_t[pool];
  for (int i = 0; i < pool; ++i) cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking);
  int lo, hi; cudaDeviceGetStreamPriorityRange(&lo, &hi);
  cudaStream_t late; cudaStreamCreateWithPriority(&late, cudaStreamNonBlocking, priority ? hi : lo);
  cudaEvent_t ev; cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  int stuckCopy = 0, stuckKernel = 0;
  for (int a = 0; a < pool; ++a) {
    for (int kind = 0; kind < 2; ++kind) {
      *(volatile int*)flag = 0;
      spin<<<1, 1, 0, s[a]>>>(dflag);
      noop<<<1, 1, 0, s[a]>>>();
      if (kind == 0) cudaMemcpyAsync(dev, &host, 4, cudaMemcpyHostToDevice, late); else noop<<<1, 1, 0, late>>>();
      cudaEventRecord(ev, late);
      bool done = false;
      for (int t = 0; t < 100 && !done; ++t) { done = cudaEventQuery(ev) == cudaSuccess; usleep(1000); }
      if (!done) { printf("late stream (%s) stuck behind stream %d\n", kind ? "kernel" : "copy", a); (kind ? stuckKernel : stuckCopy)++; }
      *(volatile int*)flag = 1;
      cudaDeviceSynchronize();
    }
  }
  printf("pool %d priority %s: copy stuck behind %d streams, kernel stuck behind %d; err %s\n", pool, priority ? "high" : "low",
         stuckCopy, stuckKernel, cudaGetErrorString(cudaGetLastError()));
}
