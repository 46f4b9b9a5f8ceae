#pragma once

// Where a counted plan (collective "alltoallv") keeps things in a rank's scratch. First the mailboxes:
// one per channel, room for the rank with the most channels, so that every rank finds a peer's mailbox
// at the same place. Then, for plans of the "ll" protocol, the packet regions: one per scratch slot, in
// each of two halves (a call uses the half of its parity, as every LL plan does). A region holds a count
// packet (the entry's byte count) and the packets of up to the plan's max_message_bytes, its capacity.

#include <algorithm>
#include <cstdint>

#include "loom/device/packet.hpp"
#include "loom/device/program.hpp"
#include "loom/plan.hpp"

namespace loom {

// The largest entry an "ll" alltoallv plan may hold (its max_message_bytes): each scratch slot takes
// twice that in each of two halves, and packets pay off only for small messages anyway.
inline constexpr uint64_t kMaxPacketEntryBytes = uint64_t(1) << 20;

struct CountedScratch {
  uint64_t mailboxBytes = 0;
  uint64_t regionBytes = 0;  // 0 for plans without packets
  uint32_t regions = 0;      // per half

  uint64_t regionOffset(uint32_t slot) const { return mailboxBytes + uint64_t(slot) * regionBytes; }
  uint64_t oddOffset() const { return uint64_t(regions) * regionBytes; }
  uint64_t bytes() const { return mailboxBytes + 2 * oddOffset(); }
};

inline CountedScratch countedScratch(const Plan& plan) {
  CountedScratch scratch;
  uint64_t channels = 0;
  uint32_t slots = 0;
  for (const GpuProgram& gpu : plan.gpus) {
    channels = std::max<uint64_t>(channels, gpu.channels.size());
    slots = std::max(slots, gpu.scratchChunks);
  }
  const uint64_t unit = sizeof(device::LL16Packet);
  scratch.mailboxBytes = (device::kMailboxBytes * channels + unit - 1) / unit * unit;
  if (plan.protocol == Protocol::kLL) {
    scratch.regions = slots;
    scratch.regionBytes = unit + device::packetBufferBytes<device::LL16Packet>(plan.maxMessageBytes);
  }
  return scratch;
}

}  // namespace loom
