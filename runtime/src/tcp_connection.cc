#include "connection_factory.hpp"
#include "loom/error.hpp"

namespace loom {

std::shared_ptr<Connection> connectTcp(const ConnectionSetup&) {
  throw Error(ErrorCategory::kTransport, "the TCP transport is not built yet");
}

}  // namespace loom
