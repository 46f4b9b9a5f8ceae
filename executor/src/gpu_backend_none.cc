// A build without CUDA: only the CPU backend exists.

#include "backend.hpp"
#include "loom/error.hpp"

namespace loom {

std::unique_ptr<Backend> makeGpuBackend(Communicator&) {
  throw Error(ErrorCategory::kCuda,
              "this build of Loom has no CUDA support: use a host-only communicator (the CPU backend)");
}

SetupScope::SetupScope() = default;
SetupScope::~SetupScope() = default;

}  // namespace loom
