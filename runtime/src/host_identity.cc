#include "host_identity.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace loom {
namespace {

uint64_t fnv1a(const std::string& text, uint64_t hash = 1469598103934665603ull) {
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

}  // namespace

uint64_t hostHash() {
  static const uint64_t hash = [] {
    // For tests: processes of one machine that act as different hosts (each reaches the others over the
    // network transports only, as across real hosts).
    if (const char* testing = std::getenv("LOOM_TEST_HOST_ID"); testing != nullptr && *testing != 0) {
      return fnv1a(std::string("test host ") + testing);
    }
    std::string identity;
    // The boot id changes with every boot and differs between containers' hosts; the host name
    // separates hosts that share a boot id (virtual machines cloned from one image, say).
    std::ifstream bootId("/proc/sys/kernel/random/boot_id");
    std::getline(bootId, identity);
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    return fnv1a(identity + "/" + name);
  }();
  return hash;
}

uint64_t processHash() { return fnv1a(std::to_string(getpid()), hostHash()); }

}  // namespace loom
