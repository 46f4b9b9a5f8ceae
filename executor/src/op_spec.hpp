#pragma once

// What each op of the plan vocabulary takes: which chunk fields, whether they are local, remote or
// either, which channel types its remote chunks and channel lists may use, and whether it reduces or
// needs the LL protocol. One table drives both the decoder and the semantic checks.

#include <cstdint>
#include <optional>
#include <string_view>

#include "loom/plan.hpp"

namespace loom {

enum class RefKind : uint8_t {
  kNone,           // the op has no such field
  kLocal,          // a chunk of this rank
  kRemote,         // a chunk reached through a channel
  kAny,            // local, or remote when it names a channel
  kLocalScratch,   // a chunk of this rank's scratch (packets)
  kRemoteScratch,  // a chunk of a peer's scratch (packets)
};

struct RefField {
  RefKind kind = RefKind::kNone;
  bool required = false;
};

inline constexpr uint8_t kMemoryBit = 1;
inline constexpr uint8_t kPortBit = 2;
inline constexpr uint8_t kSwitchBit = 4;

inline uint8_t channelBit(ChannelType type) { return static_cast<uint8_t>(1u << static_cast<unsigned>(type)); }

struct OpSpec {
  OpType type;
  std::string_view name;
  RefField src, dst, packetDst, srcs, dsts;
  bool reduction = false;     // needs reduce_op
  bool channelList = false;   // takes "channels" (signal, wait, flush)
  bool relaxable = false;     // takes "relaxed"
  bool packet = false;        // only in ll plans
  uint8_t readChannels = 0;   // channel types allowed for remote sources
  uint8_t writeChannels = 0;  // channel types allowed for remote destinations and channel lists
};

const OpSpec& opSpec(OpType type);
std::optional<OpType> opTypeFromName(std::string_view name);

// A reader-facing list of channel types in a mask: "a memory or port channel".
std::string channelMaskText(uint8_t mask);

}  // namespace loom
