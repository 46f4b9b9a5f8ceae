#include "inline_records.hpp"

#include <cstdint>

#include "loom/device/block_state.hpp"

namespace loom {
namespace {

bool inlinable(const ResolvedProgram& resolved) {
  if (resolved.blocks() > device::kMaxInlineBlocks || resolved.ops.size() > device::kMaxInlineOps ||
      resolved.operands.size() > device::kMaxInlineOperands) {
    return false;
  }
  for (const device::Op& op : resolved.ops) {
    const bool data = device::specializedData(op.code);
    if (!data && op.code != device::OpCode::kNop) return false;
    if (data && op.bytes > UINT32_MAX) return false;
  }
  return true;
}

}  // namespace

InlineRecords::InlineRecords(const ResolvedProgram& resolved) {
  if (!inlinable(resolved)) return;
  for (uint32_t block = 0; block < resolved.blockOps.size(); ++block) {
    records_.blockOps[block] = uint8_t(resolved.blockOps[block]);
  }
  for (const device::Op& op : resolved.ops) {
    device::InlineOp& record = records_.op[records_.ops++];
    record.code = op.code;
    record.flags = op.flags;
    record.planOp = op.planOp;
    if (op.code == device::OpCode::kNop) continue;
    record.srcs = op.srcs;
    record.dsts = op.dsts;
    record.packetSources = uint8_t(op.packetSources);
    record.inputDestinations = uint8_t(op.inputDestinations);
    record.bytes = uint32_t(op.bytes);
    record.first = uint8_t(operands_.size());
    for (uint32_t i = 0; i < uint32_t(op.srcs) + op.dsts; ++i) {
      const device::Operand& operand = resolved.operands[op.first + i];
      if (i >= op.srcs && operand.packet) record.packetDestinations |= uint8_t(1u << (i - op.srcs));
      operands_.push_back(operand);
    }
  }
}

const device::InlineProgram& InlineRecords::forCall(const device::Program& program, const device::ChannelView* views) {
  device::Program onHost = program;
  onHost.channels = const_cast<device::ChannelView*>(views);
  const device::BlockState even{onHost, 0, 0, 1, 0, false};
  for (size_t i = 0; i < operands_.size(); ++i) {
    records_.operand[i].address = reinterpret_cast<uintptr_t>(device::operandAddress(even, operands_[i]));
    records_.operand[i].oddOffset = operands_[i].oddOffset;
  }
  return records_;
}

}  // namespace loom
