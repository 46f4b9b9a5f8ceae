#pragma once

// What ncclGetUniqueId hands out: Loom's bootstrap id in NCCL's 128 bytes.
//   bytes 0-7    "LOOMNCCL"
//   byte  8      format version (1)
//   bytes 9-15   zero
//   bytes 16-55  loom::UniqueId (root address and secret, unique_id.hpp)
//   bytes 56-127 zero
// The real NCCL's own id is not in it: rank 0 makes one when the communicator is created and sends
// it to the other ranks over Loom's bootstrap, so both communicators come from this one id.

#include <nccl.h>

#include "loom/unique_id.hpp"

namespace loom::nccl {

inline constexpr char kUniqueIdMagic[8] = {'L', 'O', 'O', 'M', 'N', 'C', 'C', 'L'};
inline constexpr uint8_t kUniqueIdVersion = 1;

ncclUniqueId encodeUniqueId(const UniqueId& id);
// InvalidArgument error saying what is wrong (an id of the real NCCL, another version, bad bytes).
UniqueId decodeUniqueId(const ncclUniqueId& id);

}  // namespace loom::nccl
