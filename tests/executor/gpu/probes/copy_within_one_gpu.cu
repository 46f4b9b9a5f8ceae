// Probe (run by hand: nvcc -O2 -o probe copy_within_one_gpu.cu && ./probe): which copies still run while
// every multiprocessor holds a spinning block? On an H100 (2026-11-25) a device-to-device copy within one
// GPU (a kernel of CUDA's) stalls when the SMs are full; through pinned host memory (copy engines) it runs.
// Methods 3 and 4 ask whether a batch copy hinted to overlap compute avoids SMs, and whether any other kernel runs.
#include <cstdio>
#include <unistd.h>
#include <cuda_runtime.h>
__global__ void __launch_bounds__(1024) spin(volatile int* flag) { while (*flag == 0) {} }
__global__ void touch(int* p) { p[threadIdx.x] = 1; }
static bool completes(cudaStream_t s, cudaEvent_t ev) {
  cudaEventRecord(ev, s);
  for (int t = 0; t < 500; ++t) { if (cudaEventQuery(ev) == cudaSuccess) return true; usleep(1000); }
  return false;
}
int main() {
  int* flag; cudaHostAlloc(&flag, 4, cudaHostAllocMapped);
  int* dflag; cudaHostGetDevicePointer(&dflag, flag, 0);
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t bytes = 1 << 20;
  char *a, *b, *h; cudaMalloc(&a, bytes); cudaMalloc(&b, bytes); cudaHostAlloc(&h, bytes, 0);
  cudaStream_t ks, cs; cudaStreamCreateWithFlags(&ks, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
  cudaEvent_t ev; cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  struct Fill { int blocks, threads; const char* what; } fills[] = {
      {2 * sms, 1024, "every SM full (2 x 1024 threads)"}, {sms, 512, "one 512-thread block per SM"},
      {sms - 1, 512, "one 512-thread block on all SMs but one"}};
  for (auto f : fills) {
    for (int method = 0; method < 5; ++method) {
      *(volatile int*)flag = 0;
      spin<<<f.blocks, f.threads, 0, ks>>>(dflag);
      usleep(20000);
      const char* names[] = {"D2D 1 MiB", "D2D 2 KiB", "D2H+H2D 1 MiB via pinned host",
                             "D2D 1 MiB batch, prefer overlap with compute", "a 1-block kernel of another kernel"};
      const char* name = names[method];
      if (method == 0) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, cs);
      else if (method == 1) cudaMemcpyAsync(b, a, 2048, cudaMemcpyDeviceToDevice, cs);
      else if (method == 2) { cudaMemcpyAsync(h, a, bytes, cudaMemcpyDeviceToHost, cs); cudaMemcpyAsync(b, h, bytes, cudaMemcpyHostToDevice, cs); }
      else if (method == 3) {
        void* dsts[] = {b}; const void* srcs[] = {a}; size_t sizes[] = {bytes}; size_t index = 0;
        cudaMemcpyAttributes attr{}; attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
        const cudaError_t e = cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &index, 1, cs);
        if (e != cudaSuccess) printf("cudaMemcpyBatchAsync: %s\n", cudaGetErrorString(e));
      } else touch<<<1, 32, 0, cs>>>((int*)b);
      const bool ok = completes(cs, ev);
      printf("%s: %s %s\n", f.what, name, ok ? "completes" : "STUCK");
      *(volatile int*)flag = 1;
      cudaDeviceSynchronize();
    }
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
