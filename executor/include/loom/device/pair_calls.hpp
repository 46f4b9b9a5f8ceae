#pragma once

// Counted calls of two-rank plans, each of its own executor, run by one kernel launch
// (Executor::executeCountedGroup): the NCCL library's send/recv group on a communicator of more than two
// ranks, one call per peer's link. Each call keeps its own program and blocks; block b of the launch runs
// block b - firstBlock[i] of call i, the last call whose first block is at most b. A two-rank call's table
// holds four entries (sends and receives of ranks 0 and 1), so the group travels in the kernel's parameters
// (a CUDA graph captures it by value) at about 480 bytes a call rather than a whole CallTable's 544 more.

#include <cstdint>

#include "loom/device/macros.hpp"
#include "loom/device/program.hpp"

namespace loom::device {

inline constexpr uint32_t kMaxGroupedCalls = 16;  // the links of a 17-rank communicator's all-to-all
// Groups of up to this many calls take a kernel whose parameters stay under 4 KiB (the size kernel
// parameters had before CUDA 12.1), which the launch copies faster.
inline constexpr uint32_t kFewGroupedCalls = 4;
inline constexpr uint32_t kPairEntries = 4;

struct PairCall {
  Program program;
  CallEntry held[kPairEntries];  // CallTable::held of a two-rank call
  uint64_t inputBytes;
  uint64_t outputBytes;
  uint32_t alignment;
};

template <uint32_t kCalls>
struct PairCalls {
  uint32_t count;
  uint32_t firstBlock[kCalls];
  PairCall calls[kCalls];
};

static_assert(sizeof(PairCalls<kFewGroupedCalls>) <= 4096, "a few calls' parameters stay under 4 KiB");

// The call that block `block` of the launch belongs to.
template <uint32_t kCalls>
LOOM_HOST_DEVICE uint32_t pairCallOf(const PairCalls<kCalls>& group, uint32_t block) {
  uint32_t call = 0;
  while (call + 1 < group.count && block >= group.firstBlock[call + 1]) ++call;
  return call;
}

// The whole table of call `call` (what runBlock reads), from its four held entries.
LOOM_HOST_DEVICE void expandPairTable(const PairCall& call, CallTable& table) {
  table.entries = nullptr;
  for (uint32_t e = 0; e < kPairEntries; ++e) table.held[e] = call.held[e];
  table.inputBytes = call.inputBytes;
  table.outputBytes = call.outputBytes;
  table.peers = 2;
  table.alignment = call.alignment;
}

}  // namespace loom::device
