#pragma once

#include <cstdint>

namespace loom {

// Equal on two processes exactly when they run on the same host (boot id and host name): ranks with
// the same host hash share a node, CUDA IPC and Unix sockets.
uint64_t hostHash();
// Unique to this process on this host.
uint64_t processHash();

}  // namespace loom
