// A wait that no signal satisfies must end in the timeout diagnostic, not a hang. Run with two
// ranks and LOOM_DEVICE_TIMEOUT_MS set low: rank 0 waits on a memory channel rank 1 never
// signals; its kernel traps, and the host reads the record. Prints the diagnostic and exits 0 when
// it names the rank, block, channel, peer and counts.

#include <cstdio>
#include <string>

#include "gpu_job.hpp"
#include "loom/device_diagnostics.hpp"
#include "loom/error.hpp"
#include "loom/gpu_buffer.hpp"
#include "loom/memory_channel.hpp"
#include "loom/semaphore.hpp"

__global__ void waitForever(loom::device::MemoryChannelHandle channel) {
  if (threadIdx.x == 0) channel.wait(7);
}

int main() {
  loom::testing::GpuJob job;
  loom::Communicator& comm = *job.comm;
  const int peer = 1 - comm.rank();
  loom::GpuBuffer buffer(4096);
  loom::RegisteredMemory local = comm.registerMemory(buffer.data(), buffer.bytes(), loom::Transport::kCudaIpc);
  comm.sendMemory(local, peer, 1);
  loom::RegisteredMemory remote = comm.recvMemory(peer, 1);
  auto semaphore = std::make_shared<loom::MemorySemaphore>(comm, peer, 1);
  loom::MemoryChannel channel(semaphore, remote, local, {}, 2);
  int status = 0;
  if (comm.rank() == 0) {
    waitForever<<<3, 64>>>(channel.deviceHandle());
    cudaError_t result = cudaDeviceSynchronize();
    std::printf("kernel ended with %s\n", cudaGetErrorName(result));
    try {
      comm.deviceDiagnostics().check();
      std::printf("FAIL: no diagnostic was recorded\n");
      status = 1;
    } catch (const loom::Error& error) {
      const std::string text = error.what();
      std::printf("diagnostic: %s\n", text.c_str());
      for (const char* piece : {"rank 0", "thread block ", "op 7", "semaphore wait on channel 2 (peer 1)",
                                "timed out after", "expected count 1, saw 0"}) {
        if (text.find(piece) == std::string::npos) {
          std::printf("FAIL: the diagnostic lacks '%s'\n", piece);
          status = 1;
        }
      }
      if (error.category() != loom::ErrorCategory::kTimeout) status = 1;
    }
    if (result == cudaSuccess) status = 1;
  }
  job.bootstrap->barrier();
  std::printf("rank %d: %s\n", comm.rank(), status == 0 ? "ok" : "FAILED");
  return status;
}
