#pragma once

// Plans as small JSON texts and resolved programs as text, for the tests of resolution
// (resolve_test.cc) and of the fast path's specialisation (specialize_test.cc): every assertion is on
// what the interpreter would run, op by op, with each operand's channel, buffer and offsets.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/plan.hpp"
#include "resolve.hpp"

namespace loom::test {

using device::OpCode;

// The program text of one rank: the contents of its "channels", "semaphores" and "threadblocks" lists.
struct RankText {
  uint32_t id = 0;
  uint32_t inputChunks = 2;
  uint32_t outputChunks = 2;
  uint32_t scratchChunks = 2;
  std::string channels;
  std::string semaphores;  // left out when empty
  std::string threadblocks = R"({"id": 0, "ops": [{"op": "nop"}]})";

  std::string json() const {
    return R"({"id": )" + std::to_string(id) + R"(, "input_chunks": )" + std::to_string(inputChunks) +
           R"(, "output_chunks": )" + std::to_string(outputChunks) + R"(, "scratch_chunks": )" +
           std::to_string(scratchChunks) + R"(, "channels": [)" + channels + "]" +
           (semaphores.empty() ? "" : R"(, "semaphores": [)" + semaphores + "]") + R"(, "threadblocks": [)" +
           threadblocks + "]}";
  }
};

// A whole plan of `ranks.size()` ranks on one node, named "resolve_test".
struct PlanText {
  std::string collective = "allreduce";
  std::string protocol = "simple";
  bool inplace = false;
  uint32_t alignmentBytes = 16;
  std::vector<RankText> ranks;

  Plan parse() const {
    std::string gpus;
    for (const RankText& rank : ranks) gpus += (gpus.empty() ? "" : ", ") + rank.json();
    const std::string n = std::to_string(ranks.size());
    const std::string inPlace = inplace ? "true" : "false";
    return Plan::parse(R"({"format_version": 1, "name": "resolve_test", "collective": ")" + collective +
                       R"(", "protocol": ")" + protocol + R"(", "inplace": )" + inPlace + R"(, "world_size": )" + n +
                       R"(, "ranks_per_node": )" + n + R"(, "threads_per_block": 256, "min_message_bytes": 0,
                       "max_message_bytes": 1073741824, "alignment_bytes": )" +
                       std::to_string(alignmentBytes) + R"(, "gpus": [)" + gpus + "]}");
  }
};

inline std::string channel(uint32_t id, const std::string& type, uint32_t peer) {
  return R"({"id": )" + std::to_string(id) + R"(, "type": ")" + type + R"(", "peer": )" + std::to_string(peer) + "}";
}

inline std::string threadblock(uint32_t id, const std::string& ops) {
  return R"({"id": )" + std::to_string(id) + R"(, "ops": [)" + ops + "]}";
}

// Two ranks joined by channel 0 of `channelType`; rank 0 runs `ops` in thread block 0, rank 1 a nop.
// Both cut input and output into 2 chunks and keep 2 scratch chunks.
inline PlanText twoRanks(const std::string& ops, const std::string& channelType = "memory",
                         const std::string& protocol = "simple") {
  PlanText plan;
  plan.protocol = protocol;
  plan.ranks.resize(2);
  plan.ranks[0].channels = channel(0, channelType, 1);
  plan.ranks[0].threadblocks = threadblock(0, ops);
  plan.ranks[1].id = 1;
  plan.ranks[1].channels = channel(0, channelType, 0);
  return plan;
}

inline const char* codeName(OpCode code) {
  switch (code) {
    case OpCode::kTransfer:
      return "transfer";
    case OpCode::kCopy:
      return "copy";
    case OpCode::kFastTransfer:
      return "fast_transfer";
    case OpCode::kOneShot:
      return "one_shot";
    case OpCode::kPortPut:
      return "port_put";
    case OpCode::kSignal:
      return "signal";
    case OpCode::kWait:
      return "wait";
    case OpCode::kFlush:
      return "flush";
    case OpCode::kBarrier:
      return "barrier";
    case OpCode::kSemAcquire:
      return "sem_acquire";
    case OpCode::kSemRelease:
      return "sem_release";
    case OpCode::kNop:
      return "nop";
  }
  return "?";
}

// "local:input+512", "ch0:scratch+1024|odd+3072 packets", "ch1:staging+0|odd+3072 packets".
inline std::string operandText(const device::Operand& o) {
  static const char* const kBuffers[] = {"input", "output", "scratch", "staging"};
  std::string text = o.channel == device::kLocalOperand ? std::string("local") : "ch" + std::to_string(o.channel);
  text.append(":").append(o.buffer < 4 ? kBuffers[o.buffer] : "?").append("+").append(std::to_string(o.offset));
  if (o.oddOffset != 0) text += "|odd+" + std::to_string(o.oddOffset);
  if (o.packet != 0) text += " packets";
  return text;
}

// One resolved op as a line that names every field the interpreter reads for it, so that a test states
// a whole op at once and a failure shows what was resolved instead:
//   "transfer reduces bytes=488 (op 3): local:input+512, local:scratch+512 -> local:output+512"
//   "wait sync_before sync_after (op 2): ch0"
inline std::string describe(const ResolvedProgram& program, const device::Op& op) {
  std::string text = codeName(op.code);
  static const std::pair<uint8_t, const char*> kFlags[] = {
      {device::kOpSyncBefore, "sync_before"}, {device::kOpSyncAfter, "sync_after"},
      {device::kOpRelaxed, "relaxed"},        {device::kOpReduces, "reduces"},
      {device::kOpPortSignal, "port_signal"}, {device::kOpPortFlush, "port_flush"},
      {device::kOpReadsOnly, "reads_only"}};
  for (const auto& [flag, name] : kFlags) {
    if (op.flags & flag) text += std::string(" ") + name;
  }
  const bool moves = op.code == OpCode::kTransfer || op.code == OpCode::kPortPut || op.code == OpCode::kCopy ||
                     op.code == OpCode::kFastTransfer || op.code == OpCode::kOneShot;
  if (moves) text += " bytes=" + std::to_string(op.bytes);
  if (op.code == OpCode::kFastTransfer || op.code == OpCode::kOneShot) {
    text += " packet_sources=" + std::to_string(op.packetSources);
  }
  if (op.code == OpCode::kOneShot) text += " input_destinations=" + std::to_string(op.inputDestinations);
  if (op.code == OpCode::kBarrier) {
    text += " barrier=" + std::to_string(op.barrier) + " participants=" + std::to_string(op.participants);
  }
  text += " (op " + std::to_string(op.planOp) + ")";
  if (op.srcs + op.dsts == 0) return text;
  text += ":";
  for (uint32_t i = 0; i < uint32_t(op.srcs) + op.dsts; ++i) {
    const device::Operand& o = program.operands.at(op.first + i);
    text += i == 0 ? " " : i == op.srcs ? " -> " : ", ";
    if (moves) {
      text += operandText(o);
    } else {
      // Sync ops use only `channel`: a channel index, or a semaphore index for sem_acquire/release.
      const bool semaphore = op.code == OpCode::kSemAcquire || op.code == OpCode::kSemRelease;
      text += (semaphore ? "sem" : "ch") + std::to_string(o.channel);
    }
  }
  return text;
}

// Every op of a program, in order; also checks that the ops' operand runs follow one another.
inline std::vector<std::string> describe(const ResolvedProgram& program) {
  std::vector<std::string> lines;
  uint32_t next = 0;
  for (const device::Op& op : program.ops) {
    EXPECT_EQ(op.first, next) << "operands of op " << lines.size() << " do not follow the previous op's";
    next = op.first + op.srcs + op.dsts;
    lines.push_back(describe(program, op));
  }
  EXPECT_EQ(next, program.operands.size());
  return lines;
}

// The ops of thread block `block` (in id order).
inline std::vector<std::string> describeBlock(const ResolvedProgram& program, uint32_t block) {
  std::vector<std::string> lines;
  for (uint32_t i = program.blockOps.at(block); i < program.blockOps.at(block + 1); ++i) {
    lines.push_back(describe(program, program.ops[i]));
  }
  return lines;
}

inline const device::Operand& operand(const ResolvedProgram& program, const device::Op& op, uint32_t i) {
  return program.operands.at(op.first + i);
}

}  // namespace loom::test
