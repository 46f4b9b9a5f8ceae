#pragma once

#include <cstdint>
#include <string>

namespace loom {

// Equal on two processes exactly when they run on the same host (boot id, host name and network
// namespace): ranks with the same host hash share a node, CUDA IPC, shared memory and Unix sockets.
uint64_t hostHash();
// What hostHash() is made of, for messages: "boot id ..., host name ..., network namespace net:[...]"
// (or the LOOM_TEST_HOST_ID that stands in for it).
std::string hostIdentityText();
// Unique to this process on this host.
uint64_t processHash();

}  // namespace loom
