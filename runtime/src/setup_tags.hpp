#pragma once

// Bootstrap tags of the runtime's own setup messages. The top byte says what the message is for, so
// that a user's tag (below 2^56) for a connection never collides with one for a memory exchange or
// with the user's own bootstrap messages, which should keep the top bit clear.

#include <cstdint>
#include <string>

#include "loom/error.hpp"

namespace loom {

enum class SetupPurpose : uint8_t { kHostIdentity = 1, kMemory = 2, kConnection = 3, kSemaphore = 4, kFdPassing = 5, kSplit = 6 };

constexpr uint64_t kMaxSetupTag = (uint64_t{1} << 56) - 1;

inline uint64_t setupTag(SetupPurpose purpose, uint64_t tag, const char* what) {
  if (tag > kMaxSetupTag) {
    throw Error(ErrorCategory::kInvalidArgument,
                std::string(what) + ": tag " + std::to_string(tag) + " is above " + std::to_string(kMaxSetupTag));
  }
  return (uint64_t{0x80} | static_cast<uint64_t>(purpose)) << 56 | tag;
}

}  // namespace loom
