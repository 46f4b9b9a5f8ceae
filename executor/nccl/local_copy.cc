// World size 1 (and Broadcast's root when it is out of place) copies on the call's stream, as NCCL
// does: enqueued, never synchronising the host, and captured like any copy under CUDA graph capture.

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "loom/error.hpp"
#include "nccl_comm.hpp"

namespace loom::nccl {

void localCopy(const ncclComm& comm, void* dst, const void* src, uint64_t bytes, cudaStream_t stream) {
  if (dst == src || bytes == 0) return;
  if (comm.settings.cpuBackend) {
    if (stream != nullptr) {
      throw Error(ErrorCategory::kInvalidArgument, "stream: the CPU backend (LOOM_NCCL_CPU_BACKEND) takes no stream");
    }
    std::memmove(dst, src, bytes);
    return;
  }
  const cudaError_t status = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
  if (status != cudaSuccess) {
    throw Error(ErrorCategory::kCuda, "cudaMemcpyAsync of " + std::to_string(bytes) +
                                          " bytes on the call's stream: " + cudaGetErrorString(status));
  }
}

}  // namespace loom::nccl
