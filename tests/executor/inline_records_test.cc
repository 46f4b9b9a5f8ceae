// The fast kernel's inline program (executor/src/inline_records.cc): which specialised programs travel
// in the kernel's parameters, and the final addresses the host computes for each call. That a program
// run from its inline records computes the same bits is tested end to end on the CPU backend
// (tests/executor/test_fast_path.py).

#include "inline_records.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "resolve.hpp"
#include "resolved_program_text.hpp"
#include "specialize.hpp"

namespace loom {
namespace {

using namespace test;  // NOLINT(google-build-using-namespace): the plan text helpers

// The LL one-shot pair (a packet put of chunk 1 to the peer, then its reduction with the peer's packets).
const std::string kOneShotPair = R"({"op": "put_packet", "src": {"buffer": "input", "index": 1},
     "dsts": [{"channel": 0, "buffer": "scratch", "index": 1}]},
    {"op": "reduce_packet", "reduce_op": "sum", "src": {"buffer": "input", "index": 1},
     "srcs": [{"buffer": "scratch", "index": 1}], "dst": {"buffer": "output", "index": 1}})";

ResolvedProgram specialized(const PlanText& text, uint64_t bytes) {
  ResolvedProgram program = resolve(text.parse(), 0, bytes);
  specialize(program);
  return program;
}

uintptr_t address(const void* base, uint64_t offset) { return reinterpret_cast<uintptr_t>(base) + offset; }

TEST(InlineRecordsTest, AnLLOneShotCarriesFinalAddressesForEachCall) {
  const ResolvedProgram program = specialized(twoRanks(kOneShotPair, "memory", "ll"), 1000);
  ASSERT_EQ(program.ops.size(), 1u);
  const device::Op& op = program.ops[0];
  ASSERT_EQ(op.code, device::OpCode::kOneShot);
  InlineRecords records(program);
  ASSERT_FALSE(records.empty());

  alignas(16) static uint8_t input[4096], output[4096], scratch[8192], peerScratch[8192], otherInput[4096];
  std::vector<device::ChannelView> views(1);
  views[0].peerBuffers[2] = peerScratch;
  device::Program launch{};
  launch.buffers[0] = input;
  launch.buffers[1] = output;
  launch.buffers[2] = scratch;
  const device::InlineProgram& first = records.forCall(launch, views.data());
  EXPECT_EQ(first.ops, 1u);
  EXPECT_EQ(first.blockOps[0], 0);
  EXPECT_EQ(first.blockOps[1], 1);
  const device::InlineOp& record = first.op[0];
  EXPECT_EQ(record.code, device::OpCode::kOneShot);
  EXPECT_EQ(record.bytes, op.bytes);
  EXPECT_EQ(record.planOp, op.planOp);
  EXPECT_EQ(record.srcs, 2);
  EXPECT_EQ(record.dsts, 2);
  EXPECT_EQ(record.packetSources, 1);
  EXPECT_EQ(record.inputDestinations, 1);
  EXPECT_EQ(record.packetDestinations, 0b10);  // the result is plain, the chunk's copy at the peer packets
  const device::Operand* operands = &program.operands[op.first];
  const uintptr_t expected[] = {address(input, operands[0].offset), address(scratch, operands[1].offset),
                                address(output, operands[2].offset), address(peerScratch, operands[3].offset)};
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(first.operand[record.first + i].address, expected[i]) << "operand " << i;
    EXPECT_EQ(first.operand[record.first + i].oddOffset, operands[i].oddOffset) << "operand " << i;
  }
  EXPECT_NE(operands[1].oddOffset, 0u);  // LL scratch alternates halves: the kernel adds it on odd calls

  // The next call's buffers: the records follow them.
  launch.buffers[0] = otherInput;
  const device::InlineProgram& second = records.forCall(launch, views.data());
  EXPECT_EQ(second.operand[record.first].address, address(otherInput, operands[0].offset));
}

TEST(InlineRecordsTest, APeersMovedOutputIsShifted) {
  const std::string put = R"({"op": "put", "src": {"buffer": "input", "index": 0},
      "dsts": [{"channel": 0, "buffer": "output", "index": 0}]})";
  const ResolvedProgram program = specialized(twoRanks(put), 1024);
  InlineRecords records(program);
  ASSERT_FALSE(records.empty());
  alignas(16) static uint8_t input[1024], peerOutput[1 << 14];
  std::vector<device::ChannelView> views(1);
  views[0].peerBuffers[1] = peerOutput;
  views[0].shiftSlot = 0;
  device::Program launch{};
  launch.buffers[0] = input;
  launch.peerShifts[0][1] = 4096;
  const device::InlineProgram& call = records.forCall(launch, views.data());
  const device::Operand& destination = program.operands[program.ops[0].first + 1];
  EXPECT_EQ(call.operand[call.op[0].first + 1].address, address(peerOutput, destination.offset + 4096));
}

TEST(InlineRecordsTest, ProgramsWithSyncOrGenericOpsStayInTheTables) {
  const ResolvedProgram ported = specialized(
      twoRanks(R"({"op": "put_with_signal", "src": {"buffer": "input", "index": 0},
          "dsts": [{"channel": 0, "buffer": "output", "index": 0}]}, {"op": "wait", "channels": [0]})",
               "port"),
      1024);
  EXPECT_TRUE(InlineRecords(ported).empty());
  const ResolvedProgram generic = resolve(twoRanks(kOneShotPair, "memory", "ll").parse(), 0, 1000);
  EXPECT_TRUE(InlineRecords(generic).empty());  // not specialised: generic kTransfer ops
}

TEST(InlineRecordsTest, ProgramsBeyondTheBoundsStayInTheTables) {
  ResolvedProgram program;
  program.blockOps = {0};
  for (uint32_t block = 0; block < device::kMaxInlineBlocks; ++block) {
    device::Op nop{};
    nop.code = device::OpCode::kNop;
    program.ops.push_back(nop);
    program.blockOps.push_back(uint32_t(program.ops.size()));
  }
  EXPECT_FALSE(InlineRecords(program).empty());
  device::Op nop{};
  nop.code = device::OpCode::kNop;
  program.ops.push_back(nop);
  program.blockOps.push_back(uint32_t(program.ops.size()));  // one block too many
  EXPECT_TRUE(InlineRecords(program).empty());

  ResolvedProgram large = specialized(twoRanks(kOneShotPair, "memory", "ll"), 1000);
  large.ops[0].bytes = uint64_t{1} << 32;  // counts travel in 32 bits
  EXPECT_TRUE(InlineRecords(large).empty());
}

}  // namespace
}  // namespace loom
