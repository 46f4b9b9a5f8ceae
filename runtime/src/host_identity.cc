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

const std::string& identityText() {
  static const std::string text = [] {
    // For tests: processes of one machine that act as different hosts (each reaches the others over the
    // network transports only, as across real hosts).
    if (const char* testing = std::getenv("LOOM_TEST_HOST_ID"); testing != nullptr && *testing != 0) {
      return std::string("LOOM_TEST_HOST_ID=") + testing;
    }
    // The boot id changes with every boot and differs between containers' hosts; the host name separates
    // hosts that share a boot id (virtual machines cloned from one image, say); the network namespace
    // separates containers of one machine that share both: abstract Unix sockets, and so the passing of
    // descriptors, reach only processes of one namespace.
    std::string bootId;
    std::ifstream bootIdFile("/proc/sys/kernel/random/boot_id");
    std::getline(bootIdFile, bootId);
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    char netns[128] = {};
    const ssize_t length = readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
    return "boot id " + (bootId.empty() ? std::string("unknown") : bootId) + ", host name " + name +
           ", network namespace " + (length > 0 ? std::string(netns, size_t(length)) : std::string("unknown"));
  }();
  return text;
}

}  // namespace

uint64_t hostHash() {
  static const uint64_t hash = fnv1a(identityText());
  return hash;
}

std::string hostIdentityText() { return identityText(); }

uint64_t processHash() { return fnv1a(std::to_string(getpid()), hostHash()); }

}  // namespace loom
