#pragma once

// What one thread block knows while it runs its ops of a resolved program (interpreter.hpp), and the
// helpers every handler uses: the block-wide sync, operand addresses, the call's LL flag.

#include <cstdint>

#include "loom/device/macros.hpp"
#include "loom/device/program.hpp"

namespace loom::device {

struct BlockState {
  const Program& program;
  uint32_t block;
  uint32_t thread;
  uint32_t threads;
  uint32_t flag;                     // this call's LL packet flag: never 0, so zeroed scratch never matches
  bool odd;                          // this call's parity: which half of LL scratch it uses
  const CallTable* table = nullptr;  // a counted call's entries (entry_copy.hpp); null for every other plan
};

LOOM_HOST_DEVICE void syncBlock() {
#if LOOM_DEVICE_PASS
  __syncthreads();
#endif
}

LOOM_HOST_DEVICE uint8_t* operandAddress(const BlockState& s, const Operand& o) {
  const uint64_t offset = o.offset + (s.odd ? o.oddOffset : 0);
  if (o.channel == kLocalOperand) return static_cast<uint8_t*>(s.program.buffers[o.buffer]) + offset;
  const ChannelView& channel = s.program.channels[o.channel];
  if (o.buffer == kStagingBuffer) return static_cast<uint8_t*>(channel.staging) + offset;
  // A peer's input or output may sit elsewhere in the same allocation this call (program.hpp).
  const int64_t shift = o.buffer < 2 ? s.program.peerShifts[channel.shiftSlot][o.buffer] : 0;
  return static_cast<uint8_t*>(channel.peerBuffers[o.buffer]) + offset + shift;
}

// The call's LL flag for a block that has finished `calls` calls: 1, 2, ..., skipping 0 on wrap.
LOOM_HOST_DEVICE uint32_t packetFlag(uint64_t calls) { return uint32_t(calls % 0xFFFFFFFFu) + 1; }

}  // namespace loom::device
