#include "packet_writer.hpp"

#include "loom/device/program.hpp"
#include "op_context.hpp"
#include "resolve.hpp"

namespace loom {
namespace {

bool putsPackets(device::OpCode code) {
  switch (code) {
    case device::OpCode::kTransfer:
    case device::OpCode::kCopy:
    case device::OpCode::kFastTransfer:
    case device::OpCode::kOneShot:
      return true;
    default:
      return false;
  }
}

bool covers(const device::Operand& operand, uint64_t bytes, uint64_t offset) {
  const auto inside = [&](uint64_t start) { return offset >= start && offset - start < bytes; };
  return inside(operand.offset) || (operand.oddOffset != 0 && inside(operand.offset + operand.oddOffset));
}

}  // namespace

std::optional<PacketWriter> packetWriter(const Plan& plan, uint32_t rank, uint64_t messageBytes,
                                         uint64_t scratchOffset) {
  for (const GpuProgram& peer : plan.gpus) {
    if (peer.rank == rank) continue;
    ResolvedProgram program;
    try {
      program = resolve(plan, peer.rank, messageBytes);
    } catch (const std::exception&) {
      continue;  // an error path: a peer program that does not resolve names no one
    }
    for (uint32_t block = 0; block < program.blocks(); ++block) {
      for (uint32_t index = program.blockOps[block]; index < program.blockOps[block + 1]; ++index) {
        const device::Op& op = program.ops[index];
        if (!putsPackets(op.code)) continue;
        // LL16 packets: twice the data bytes.
        const uint64_t packetBytes = 2 * op.bytes;
        for (uint32_t d = 0; d < op.dsts; ++d) {
          const device::Operand& dst = program.operands[op.first + op.srcs + d];
          if (dst.channel == device::kLocalOperand || !dst.packet || dst.sizing != device::OperandSizing::kFixed) {
            continue;
          }
          if (dst.buffer != uint8_t(BufferType::kScratch) && dst.buffer != device::kStagingBuffer) continue;
          if (dst.channel >= peer.channels.size() || peer.channels[dst.channel].peer != rank) continue;
          if (covers(dst, packetBytes, scratchOffset)) return PacketWriter{peer.rank, int32_t(block), int32_t(op.planOp)};
        }
      }
    }
  }
  return std::nullopt;
}

std::string packetWriterText(const Plan& plan, const std::optional<PacketWriter>& writer) {
  if (!writer) return "";
  const std::string peer = "rank " + std::to_string(writer->rank);
  std::string text = "; the packet it waited for is " + peer + "'s to write";
  uint32_t threadBlockId = 0;
  if (const Op* op = locatePlanOp(plan, writer->rank, writer->block, writer->op, &threadBlockId)) {
    text += " (" + planOpName(*op, threadBlockId, writer->op) + ")";
  }
  return text + ", and " + peer + " did not write it in time (stalled, stopped, or on another path)";
}

}  // namespace loom
