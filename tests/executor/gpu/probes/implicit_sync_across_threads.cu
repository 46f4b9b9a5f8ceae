// Probe (run by hand: nvcc -O2 -std=c++17 -o probe implicit_sync_across_threads.cu -lcuda && ./probe): with ranks
// that are threads of one process sharing a GPU, does a host call on one thread wait for (or put its later work
// behind) another thread's kernel that is still running? Thread A's kernel spins until thread B's next kernel
// sets a flag; B first makes one host call (an allocation, a memset, a copy, ...), then launches that kernel.
// If the call returns and B's kernel runs, they overlap; if not within a second, the host releases A's kernel
// through mapped memory and the probe reports which step was held: the call itself, or the kernel after it.
// On an H200 with driver 580 (2026-11-29): every step ran alongside (allocations with cudaMalloc and cuMem,
// memsets and copies of fresh memory, pinned host allocations, stream and event creation) but cudaFree,
// which waits for the whole device; cudaFreeHost did the same to nccl-tests (docs/testing.md). The same with a
// D2H copy or a memset queued behind A's kernel on its stream, at 8 and 32 hardware queues.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <utility>
#include <string>
#include <thread>
#include <vector>

__global__ void spinUntil(volatile int* flag, volatile int* escape) {
  while (*flag == 0 && *escape == 0) {
  }
}
__global__ void setFlag(int* flag) { *flag = 1; }

static bool waitFor(const std::function<bool()>& done, int ms) {
  for (int t = 0; t < ms; ++t) {
    if (done()) return true;
    usleep(1000);
  }
  return done();
}

// Two granules of device memory as Loom's peer-visible allocations make them (cuMem, exportable), mapped here.
static std::pair<CUdeviceptr, size_t> mapCuMem() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  const size_t size = 2 * granularity;
  CUmemGenericAllocationHandle handle;
  cuMemCreate(&handle, size, &prop, 0);
  CUdeviceptr address = 0;
  cuMemAddressReserve(&address, size, granularity, 0, 0);
  cuMemMap(address, size, 0, handle, 0);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cuMemSetAccess(address, size, &access, 1);
  return {address, size};
}

int main() {
  cudaSetDevice(0);
  cudaFree(nullptr);
  int* escape = nullptr;
  cudaHostAlloc(&escape, sizeof(int), cudaHostAllocMapped);
  int* deviceEscape = nullptr;
  cudaHostGetDevicePointer(&deviceEscape, escape, 0);
  int* flag = nullptr;
  cudaMalloc(&flag, sizeof(int));
  cudaStream_t streamA, streamB, other;
  cudaStreamCreateWithFlags(&streamA, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&streamB, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  char *deviceA = nullptr, *deviceB = nullptr, *pinned = nullptr;
  const size_t bytes = 1 << 20;
  cudaMalloc(&deviceA, bytes);
  cudaMalloc(&deviceB, bytes);
  cudaHostAlloc(&pinned, bytes, 0);
  std::vector<char> pageable(bytes);
  cudaEvent_t spinDone;
  cudaEventCreateWithFlags(&spinDone, cudaEventDisableTiming);

  struct Step {
    const char* what;
    std::function<void()> call;
  };
  std::vector<void*> leaked;
  const std::vector<Step> steps = {
      {"nothing", [] {}},
      {"cudaMalloc 1 MiB", [&] { void* p; cudaMalloc(&p, bytes); leaked.push_back(p); }},
      {"cudaMalloc 256 MiB", [&] { void* p; cudaMalloc(&p, 256 << 20); leaked.push_back(p); }},
      {"cudaMallocHost 1 MiB", [&] { void* p; cudaMallocHost(&p, bytes); }},
      {"cudaMemsetAsync on another non-blocking stream + its sync",
       [&] { cudaMemsetAsync(deviceB, 0, bytes, other); cudaStreamSynchronize(other); }},
      {"cudaMemsetAsync on B's stream", [&] { cudaMemsetAsync(deviceB, 0, bytes, streamB); }},
      {"cudaMemcpyAsync D2D on B's stream", [&] { cudaMemcpyAsync(deviceB, deviceA, bytes, cudaMemcpyDefault, streamB); }},
      {"cudaMemcpyAsync D2D on another stream + its sync",
       [&] { cudaMemcpyAsync(deviceB, deviceA, bytes, cudaMemcpyDefault, other); cudaStreamSynchronize(other); }},
      {"cudaMemcpyAsync H2D pinned on another stream + its sync",
       [&] { cudaMemcpyAsync(deviceB, pinned, bytes, cudaMemcpyDefault, other); cudaStreamSynchronize(other); }},
      {"cudaMemcpyAsync H2D pageable on B's stream", [&] { cudaMemcpyAsync(deviceB, pageable.data(), bytes, cudaMemcpyDefault, streamB); }},
      {"cudaMemcpy (legacy stream) H2D pageable", [&] { cudaMemcpy(deviceB, pageable.data(), 4096, cudaMemcpyDefault); }},
      {"cudaStreamCreateWithFlags", [&] { cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }},
      {"cudaEventCreate", [&] { cudaEvent_t e; cudaEventCreateWithFlags(&e, cudaEventDisableTiming); }},
      {"cudaHostRegister 1 MiB", [&] { void* p = malloc(bytes); cudaHostRegister(p, bytes, cudaHostRegisterDefault); }},
      {"cuMemCreate + cuMemMap + cuMemSetAccess 2 MiB", [] { mapCuMem(); }},
      {"cudaMalloc 1 MiB + cudaMemsetAsync of it on another stream + its sync",
       [&] { void* p; cudaMalloc(&p, bytes); cudaMemsetAsync(p, 0, bytes, other); cudaStreamSynchronize(other); }},
      {"cuMem 2 MiB (create, map, set access) + cudaMemsetAsync of it on another stream + its sync",
       [&] {
         const auto [address, size] = mapCuMem();
         cudaMemsetAsync(reinterpret_cast<void*>(address), 0, size, other);
         cudaStreamSynchronize(other);
       }},
      {"cudaIpcGetMemHandle", [&] { cudaIpcMemHandle_t h; cudaIpcGetMemHandle(&h, deviceA); }},
      {"cudaFree of a 1 MiB allocation", [&] { void* p; cudaMalloc(&p, bytes); cudaFree(p); }},
  };

  setFlag<<<1, 1, 0, streamB>>>(flag);  // loaded before the steps (lazy loading would stall the first one)
  spinUntil<<<1, 1, 0, streamA>>>(flag, deviceEscape);
  cudaDeviceSynchronize();
  // What thread A queues on its stream behind its waiting kernel: nothing, or a copy or a memset, as a rank
  // that checks its result (torch's .item()) or prepares its next input does. Work queued behind a waiting
  // kernel may hold a hardware queue that other threads' copies share.
  char* pinnedA = nullptr;
  cudaHostAlloc(&pinnedA, 4096, 0);
  struct Behind {
    const char* what;
    std::function<void()> queue;
  };
  const std::vector<Behind> behinds = {
      {"", [] {}},
      {"[A: kernel, then D2H copy] ", [&] { cudaMemcpyAsync(pinnedA, deviceA, 4096, cudaMemcpyDefault, streamA); }},
      {"[A: kernel, then memset] ", [&] { cudaMemsetAsync(deviceA, 0, 4096, streamA); }},
  };
  for (const Behind& behind : behinds) {
    for (const Step& step : steps) {
      const std::string name = step.what;
      const bool copies = name.find("Memset") != std::string::npos || name.find("Memcpy") != std::string::npos;
      if (!std::string(behind.what).empty() && !copies) continue;
      cudaMemset(flag, 0, sizeof(int));
      cudaDeviceSynchronize();
      *reinterpret_cast<volatile int*>(escape) = 0;
      std::atomic<bool> callReturned{false};
      // Thread A: the peer whose kernel already waits for B's next kernel.
      spinUntil<<<1, 32, 0, streamA>>>(flag, deviceEscape);
      behind.queue();
      cudaEventRecord(spinDone, streamA);
      usleep(20000);
      const auto start = std::chrono::steady_clock::now();
      std::thread b([&] {
        cudaSetDevice(0);
        step.call();
        callReturned = true;
        setFlag<<<1, 1, 0, streamB>>>(flag);
      });
      const bool overlapped = waitFor([&] { return cudaEventQuery(spinDone) == cudaSuccess; }, 1000);
      const bool returnedInTime = callReturned.load();
      if (!overlapped) *reinterpret_cast<volatile int*>(escape) = 1;
      b.join();
      cudaDeviceSynchronize();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      const cudaError_t error = cudaGetLastError();
      std::printf("%s%-58s %s (%.1f ms)%s%s\n", behind.what, step.what,
                  overlapped ? "ran alongside"
                             : (returnedInTime ? "STALLED: the kernel after it waited" : "STALLED: the call waited"),
                  ms, error != cudaSuccess ? " error: " : "", error != cudaSuccess ? cudaGetErrorString(error) : "");
    }
  }
  return 0;
}
