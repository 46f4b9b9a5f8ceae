#pragma once

// What the multi-GPU runtime programs (tests and benchmarks) share: one rank per process, started
// by `python -m loom.launch -n N`, each on GPU LOCAL_RANK, with a communicator over the bootstrap.

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "loom/bootstrap.hpp"
#include "loom/communicator.hpp"
#include "loom/device/memory_channel_device.hpp"
#include "loom/launch_environment.hpp"

// A failed call prints where and why, and the device diagnostic if a wait timed out, then aborts.
#define LOOM_CUDA_OK(call)                                                                             \
  do {                                                                                                 \
    cudaError_t status_ = (call);                                                                      \
    if (status_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(status_)); \
      ::loom::testing::reportDeviceDiagnostic();                                                       \
      std::abort();                                                                                    \
    }                                                                                                  \
  } while (0)

namespace loom::testing {

struct GpuJob;
inline GpuJob* currentJob = nullptr;
void reportDeviceDiagnostic();

struct GpuJob {
  std::shared_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Communicator> comm;

  GpuJob() {
    LaunchEnvironment environment = detectLaunchEnvironment();
    // LOOM_TEST_ONE_GPU=1: every rank on GPU 0, as processes (their kernels take turns), so that what
    // passes between processes (cuMem descriptors) is tested on a machine with one GPU.
    const char* oneGpu = std::getenv("LOOM_TEST_ONE_GPU");
    const bool shared = oneGpu != nullptr && std::string(oneGpu) == "1";
    LOOM_CUDA_OK(cudaSetDevice(shared ? 0 : environment.localRank.value_or(environment.rank)));
    bootstrap = std::make_shared<Bootstrap>(Bootstrap::fromEnvironment());
    comm = std::make_unique<Communicator>(bootstrap);
    currentJob = this;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach the launcher even if the rank aborts
  }
  ~GpuJob() { currentJob = nullptr; }
  int rank() const { return comm->rank(); }
  int size() const { return comm->worldSize(); }
};

inline void reportDeviceDiagnostic() {
  if (currentJob == nullptr) return;
  if (auto text = currentJob->comm->deviceDiagnostics().report()) std::fprintf(stderr, "device: %s\n", text->c_str());
}

// Signal/wait ping-pong on one channel: `first` signals first. Thread 0 of the block plays.
__global__ inline void pingPong(device::MemoryChannelHandle* channels, int iterations, bool first) {
  device::MemoryChannelHandle& channel = channels[blockIdx.x];
  if (threadIdx.x != 0) return;
  for (int i = 0; i < iterations; ++i) {
    if (first) {
      channel.signal();
      channel.wait();
    } else {
      channel.wait();
      channel.signal();
    }
  }
}

// Bytes that depend on (seed, index) only, so a peer can check them without receiving them.
inline std::vector<uint8_t> patternBytes(uint64_t seed, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  std::mt19937_64 random(seed * 0x9e3779b97f4a7c15ull + 1);
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t word = random();
    for (size_t j = 0; j < 8 && i + j < bytes; ++j) out[i + j] = uint8_t(word >> (8 * j));
  }
  return out;
}

}  // namespace loom::testing
