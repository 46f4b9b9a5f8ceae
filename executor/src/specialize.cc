#include "specialize.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
  return op.srcs == 1 && op.dsts == 1 && !(op.flags & device::kOpReduces) && program.operands[op.first].packet == 0 &&
         program.operands[op.first + 1].packet == 0;
}

bool sameOperand(const device::Operand& a, const device::Operand& b) {
  return a.offset == b.offset && a.oddOffset == b.oddOffset && a.channel == b.channel && a.buffer == b.buffer &&
         a.packet == b.packet;
}

// A packet put of a chunk to peers followed, with no block sync between, by the reduction of that
// chunk with the peers' packets of it (an LL one-shot all-reduce): the pair a kOneShot replaces.
bool oneShotPair(const ResolvedProgram& program, const device::Op& put, const device::Op& reduce) {
  if (put.code != OpCode::kFastTransfer || reduce.code != OpCode::kFastTransfer) return false;
  if ((put.flags & (device::kOpReduces | device::kOpSyncAfter)) || put.srcs != 1 || put.packetSources != 0) {
    return false;
  }
  if (!(reduce.flags & device::kOpReduces) || (reduce.flags & device::kOpSyncBefore) || reduce.srcs < 2 ||
      reduce.packetSources + 1 != reduce.srcs) {
    return false;
  }
  if (put.bytes != reduce.bytes || uint32_t(put.dsts) + reduce.dsts > device::kMaxFastOperands) return false;
  for (uint32_t i = 0; i < put.dsts; ++i) {
    if (program.operands[put.first + 1 + i].packet == 0) return false;
  }
  return sameOperand(program.operands[put.first], program.operands[reduce.first]);
}

// The block sync the dependency pass puts between an in-place one-shot's put and its reduction: the
// reduction writes the chunk the put reads. Inside the fused op each thread writes only the units it
// read and sent itself, so the pair may fuse across it; the fused op syncs before instead, which keeps
// every op before the put ordered before the reduction.
bool inPlaceSync(const ResolvedProgram& program, const device::Op& put, const device::Op& sync,
                 const device::Op& reduce) {
  if (sync.code != OpCode::kNop || sync.flags != device::kOpSyncBefore || reduce.dsts != 1) return false;
  return sameOperand(program.operands[put.first], program.operands[reduce.first + reduce.srcs]);
}

// Fuses the one-shot pairs of every block; the operand runs are laid out again in op order.
void fuseOneShots(ResolvedProgram& program) {
  std::vector<device::Op> ops;
  std::vector<device::Operand> operands;
  std::vector<uint32_t> blockOps{0};
  const auto append = [&](device::Op op, std::vector<device::Operand> run) {
    op.first = uint32_t(operands.size());
    operands.insert(operands.end(), run.begin(), run.end());
    ops.push_back(op);
  };
  const auto runOf = [&](const device::Op& op) {
    return std::vector<device::Operand>(program.operands.begin() + op.first,
                                        program.operands.begin() + op.first + op.srcs + op.dsts);
  };
  for (uint32_t block = 0; block + 1 < program.blockOps.size(); ++block) {
    const uint32_t end = program.blockOps[block + 1];
    for (uint32_t i = program.blockOps[block]; i < end; ++i) {
      const device::Op& op = program.ops[i];
      const bool synced = i + 2 < end && oneShotPair(program, op, program.ops[i + 2]) &&
                          inPlaceSync(program, op, program.ops[i + 1], program.ops[i + 2]);
      if (synced || (i + 1 < end && oneShotPair(program, op, program.ops[i + 1]))) {
        const device::Op& reduce = program.ops[synced ? i + 2 : i + 1];
        // Sources: the chunk, then the peers' packets; destinations: the reduction's, then the puts'.
        std::vector<device::Operand> run = runOf(reduce);
        const std::vector<device::Operand> put = runOf(op);
        run.insert(run.end(), put.begin() + 1, put.end());
        device::Op fused = reduce;
        fused.code = OpCode::kOneShot;
        fused.flags = uint8_t((op.flags & device::kOpSyncBefore) | reduce.flags | (synced ? device::kOpSyncBefore : 0));
        fused.dsts = uint8_t(reduce.dsts + op.dsts);
        fused.inputDestinations = op.dsts;
        append(fused, std::move(run));
        i += synced ? 2 : 1;
      } else {
        append(op, runOf(op));
      }
    }
    blockOps.push_back(uint32_t(ops.size()));
  }
  program.ops = std::move(ops);
  program.operands = std::move(operands);
  program.blockOps = std::move(blockOps);
}

}  // namespace

void specialize(ResolvedProgram& program) {
  bool allSpecialized = true;
  for (device::Op& op : program.ops) {
    if (op.code != OpCode::kTransfer) continue;
    if (plainCopy(program, op)) {
      op.code = OpCode::kCopy;
    } else if (const std::optional<uint32_t> packets = fastShape(program, op)) {
      op.code = OpCode::kFastTransfer;
      op.packetSources = *packets;
    } else {
      allSpecialized = false;
    }
  }
  // A kOneShot runs only in the inline kernel, which runs programs with no generic data op.
  if (allSpecialized) fuseOneShots(program);
}

TransferCounts countTransfers(const ResolvedProgram& program) {
  TransferCounts counts;
  for (const device::Op& op : program.ops) {
    if (op.code == OpCode::kTransfer) ++counts.generic;
    if (device::specializedData(op.code)) ++counts.specialized;
  }
  return counts;
}

uint32_t launchThreads(const ResolvedProgram& program, uint32_t planThreads) {
  constexpr uint64_t kWarp = 32;
  uint64_t units = 0;
  for (const device::Op& op : program.ops) {
    if (op.code == OpCode::kTransfer || device::specializedData(op.code)) units = std::max(units, (op.bytes + 15) / 16);
  }
  const uint64_t warps = std::max<uint64_t>(1, (units + kWarp - 1) / kWarp);
  return uint32_t(std::min<uint64_t>(planThreads, warps * kWarp));
}

bool fastPathEnabled() {
  const std::optional<std::string> value = processEnvironment("LOOM_FAST_PATH");
  return !value || parseBoolean(*value, "LOOM_FAST_PATH");
}

}  // namespace loom
