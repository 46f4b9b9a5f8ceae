#pragma once

// Who was to write the packet a timed-out packet read waited for. A packet read knows only an address in
// this rank's scratch, not the peer behind it (many peers put packets into one scratch). The plan knows:
// resolving each peer's program for the same message size gives the byte ranges its packet puts cover in
// this rank's scratch (or in the port-channel staging that the proxy copies there, at the same offsets),
// so the peer whose range holds the address is the one that did not deliver: a stalled or stopped rank.

#include <cstdint>
#include <optional>
#include <string>

#include "loom/plan.hpp"

namespace loom {

struct PacketWriter {
  uint32_t rank = 0;        // the peer whose put writes the packet
  int32_t block = -1;       // its launch's thread block index (blocks in id order)
  int32_t op = -1;          // the plan op of that block
};

// The peer of `plan` whose packet put covers byte `scratchOffset` of `rank`'s scratch (either LL half), for
// calls of `messageBytes`; nullopt when none does (or the peers' programs cannot be resolved).
std::optional<PacketWriter> packetWriter(const Plan& plan, uint32_t rank, uint64_t messageBytes,
                                         uint64_t scratchOffset);

// "; the packet it waited for is rank 2's to write (thread block 0's op 1, put_packet at ar.py:12), and
// rank 2 did not write it in time (stalled, stopped, or on another path)", or "" for nullopt.
std::string packetWriterText(const Plan& plan, const std::optional<PacketWriter>& writer);

}  // namespace loom
