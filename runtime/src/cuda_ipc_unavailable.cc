// CUDA IPC in a build without CUDA.

#include "connection_factory.hpp"
#include "loom/error.hpp"

namespace loom {

std::shared_ptr<Connection> connectCudaIpc(const ConnectionSetup&) {
  throw Error(ErrorCategory::kCuda, "CUDA IPC: this build of Loom has no CUDA (nvcc was not found)");
}

}  // namespace loom
