#pragma once

// Building RegisteredMemory objects from the serialised form a peer sent.

#include <memory>
#include <span>

#include "registered_memory_impl.hpp"

namespace loom {

// Checks and decodes; InvalidArgument errors for anything malformed.
std::shared_ptr<RegisteredMemory::Impl> parseRegisteredMemory(std::span<const uint8_t> bytes);
// Makes the memory usable here: nothing for another host, the address as it is for this process,
// a CUDA IPC mapping or a shared host segment's mapping for another process on this host (`fd` is
// the cuMem allocation's or the segment's descriptor, -1 for legacy handles; not taken over).
RegisteredMemory mapRegisteredMemory(std::shared_ptr<RegisteredMemory::Impl> memory, int fd);

}  // namespace loom
