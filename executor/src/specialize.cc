#include "specialize.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "environment.hpp"

namespace loom {
namespace {

using device::OpCode;

// The shape of a transfer the fast handler takes: 1 to 8 sources, plain ones first and LL packets
// after them; 1 to 8 destinations of either kind; several sources only when they are reduced.
// Returns how many sources are packets, or nothing when the shape is not one of those.
std::optional<uint32_t> fastShape(const ResolvedProgram& program, const device::Op& op) {
  if (op.srcs == 0 || op.srcs > device::kMaxFastOperands) return std::nullopt;
  if (op.dsts == 0 || op.dsts > device::kMaxFastOperands) return std::nullopt;
  if (op.srcs > 1 && !(op.flags & device::kOpReduces)) return std::nullopt;
  uint32_t packets = 0;
  for (uint32_t i = 0; i < op.srcs; ++i) {
    const bool packet = program.operands[op.first + i].packet != 0;
    if (!packet && packets > 0) return std::nullopt;  // a plain source after a packet one
    packets += packet ? 1 : 0;
  }
  return packets;
}

bool plainCopy(const ResolvedProgram& program, const device::Op& op) {
  return op.srcs == 1 && op.dsts == 1 && !(op.flags & device::kOpReduces) &&
         program.operands[op.first].packet == 0 && program.operands[op.first + 1].packet == 0;
}

}  // namespace

void specialize(ResolvedProgram& program) {
  for (device::Op& op : program.ops) {
    if (op.code != OpCode::kTransfer) continue;
    if (plainCopy(program, op)) {
      op.code = OpCode::kCopy;
    } else if (const std::optional<uint32_t> packets = fastShape(program, op)) {
      op.code = OpCode::kFastTransfer;
      op.packetSources = *packets;
    }
  }
}

TransferCounts countTransfers(const ResolvedProgram& program) {
  TransferCounts counts;
  for (const device::Op& op : program.ops) {
    if (op.code == OpCode::kTransfer) ++counts.generic;
    if (op.code == OpCode::kCopy || op.code == OpCode::kFastTransfer) ++counts.specialized;
  }
  return counts;
}

uint32_t launchThreads(const ResolvedProgram& program, uint32_t planThreads) {
  constexpr uint64_t kWarp = 32;
  uint64_t units = 0;
  for (const device::Op& op : program.ops) {
    const bool data = op.code == OpCode::kTransfer || op.code == OpCode::kCopy || op.code == OpCode::kFastTransfer;
    if (data) units = std::max(units, (op.bytes + 15) / 16);
  }
  const uint64_t warps = std::max<uint64_t>(1, (units + kWarp - 1) / kWarp);
  return uint32_t(std::min<uint64_t>(planThreads, warps * kWarp));
}

bool genericPathForced() {
  const std::optional<std::string> value = processEnvironment("LOOM_GENERIC_PATH");
  return value && parseBoolean(*value, "LOOM_GENERIC_PATH");
}

}  // namespace loom
