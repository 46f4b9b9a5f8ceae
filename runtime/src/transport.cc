#include "loom/transport.hpp"

#include "environment.hpp"
#include "loom/error.hpp"

namespace loom {

const char* transportName(Transport transport) {
  switch (transport) {
    case Transport::kCudaIpc:
      return "cuda_ipc";
    case Transport::kIb:
      return "ib";
    case Transport::kTcp:
      return "tcp";
  }
  return "unknown";
}

std::string TransportFlags::toString() const {
  std::string text;
  for (Transport transport : {Transport::kCudaIpc, Transport::kIb, Transport::kTcp}) {
    if (has(transport)) text += (text.empty() ? "" : "|") + std::string(transportName(transport));
  }
  return text.empty() ? "none" : text;
}

IbConfig IbConfig::fromEnvironment() {
  IbConfig config;
  if (auto device = processEnvironment("LOOM_IB_DEVICE")) config.device = *device;
  if (auto port = processEnvironment("LOOM_IB_PORT")) config.port = int(parseInteger(*port, 1, 255, "LOOM_IB_PORT"));
  if (auto gid = processEnvironment("LOOM_IB_GID_INDEX")) {
    config.gidIndex = int(parseInteger(*gid, -1, 255, "LOOM_IB_GID_INDEX"));
  }
  if (auto mode = processEnvironment("LOOM_IB_SIGNAL")) {
    if (*mode == "atomic") {
      config.signalMode = IbSignalMode::kAtomic;
    } else if (*mode == "imm") {
      config.signalMode = IbSignalMode::kWriteWithImm;
    } else {
      throw Error(ErrorCategory::kInvalidArgument, "LOOM_IB_SIGNAL: expected 'atomic' or 'imm', got '" + *mode + "'");
    }
  }
  return config;
}

}  // namespace loom
