#include "loom/switch_channel.hpp"

#include "environment.hpp"
#include "loom/error.hpp"

namespace loom {

bool switchChannelsAllowed(std::string* why) {
  auto say = [why](const std::string& text) {
    if (why != nullptr) *why = text;
    return false;
  };
  // NCCL's switch wins: a job that turned NVLS off for NCCL means it for everything on the host.
  if (auto nccl = processEnvironment("NCCL_NVLS_ENABLE"); nccl && !parseBoolean(*nccl, "NCCL_NVLS_ENABLE")) {
    return say("NCCL_NVLS_ENABLE=0 is set (NVLink multicast is off on this host)");
  }
  auto loom = processEnvironment("LOOM_ENABLE_NVLS");
  if (!loom || !parseBoolean(*loom, "LOOM_ENABLE_NVLS")) {
    return say(
        "switch channels are opt-in: set LOOM_ENABLE_NVLS=1 (NVLink multicast can put a shared GPU host "
        "out of service)");
  }
  if (why != nullptr) why->clear();
  return true;
}

}  // namespace loom
