#include "connection_factory.hpp"
#include "loom/error.hpp"

namespace loom {

class IbContext {};

std::shared_ptr<IbContext> openIbContext(const IbConfig&) {
  throw Error(ErrorCategory::kTransport, "the InfiniBand transport is not built yet");
}
void registerIbMemory(IbContext&, RegisteredMemory::Impl&) {}
std::shared_ptr<Connection> connectIb(IbContext&, const ConnectionSetup&) {
  throw Error(ErrorCategory::kTransport, "the InfiniBand transport is not built yet");
}

}  // namespace loom
