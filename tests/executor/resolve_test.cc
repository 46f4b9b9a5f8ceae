// Resolution of a plan for one rank and one message size (executor/src/resolve.cc) and the byte layout
// under it (executor/src/buffer_layout.cc). Plans are small JSON texts; every assertion is on what the
// interpreter would run: op codes, flags, byte counts, and each operand's channel, buffer and offsets.

#include "resolve.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "buffer_layout.hpp"
#include "loom/error.hpp"
#include "loom/plan.hpp"
#include "resolved_program_text.hpp"

namespace loom {
namespace {

using namespace test;  // NOLINT(google-build-using-namespace): the plan and program text helpers

// A plan of `world` ranks that each run a nop, with `chunksPerSlot` chunks in every slot of its buffers:
// for the layout alone.
Plan layoutPlan(const std::string& collective, uint32_t world, uint32_t chunksPerSlot, uint32_t alignmentBytes = 16,
                const std::string& protocol = "simple") {
  PlanText plan;
  plan.collective = collective;
  plan.protocol = protocol;
  plan.alignmentBytes = alignmentBytes;
  const bool slottedInput = collective == "reducescatter" || collective == "alltoall";
  const bool slottedOutput = collective == "allgather" || collective == "alltoall";
  for (uint32_t r = 0; r < world; ++r) {
    RankText rank;
    rank.id = r;
    rank.inputChunks = chunksPerSlot * (slottedInput ? world : 1);
    rank.outputChunks = chunksPerSlot * (slottedOutput ? world : 1);
    rank.scratchChunks = 3;
    plan.ranks.push_back(rank);
  }
  return plan.parse();
}

template <typename Call>
void expectError(Call call, ErrorCategory category, const std::string& message) {
  try {
    call();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), category) << errorCategoryName(error.category()) << ": " << error.what();
    EXPECT_EQ(std::string(error.what()), message);
  }
}

uint64_t roundUp(uint64_t value, uint64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Odd sizes: chunks end mid-vector, the last chunks of a slot are short or empty.
const uint64_t kOddSizes[] = {1, 15, 17, 1000, 4100, (uint64_t{1} << 20) + 3};

TEST(BufferLayoutTest, ChunkBytesAreTheSlotSharedOutRoundedToTheAlignmentAndAtLeast16) {
  struct Case {
    uint32_t alignment, chunks;
    uint64_t message, chunkBytes;
  };
  const Case cases[] = {
      {16, 2, 1000, 512},                                      // the example of docs/plan-format.md
      {16, 2, 1024, 512},                                      // divides exactly
      {16, 3, 1000, 336},                                      // ceil(1000 / 3) = 334, up to 336
      {16, 1, 1, 16},                                          // never below 16 bytes
      {16, 4, 0, 16},                                          // an empty message still gets whole chunks
      {1, 3, 1000, 336},                                       // an alignment below 16 counts as 16
      {4, 7, 17, 16},                                          // ceil(17 / 7) = 3
      {64, 3, 1000, 384},                                      // 334 up to a multiple of 64
      {4096, 2, 1000, 4096}, {16, 8, (1u << 20) + 3, 131088},  // ceil(1048579 / 8) = 131073, up to 131088
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("alignment " + std::to_string(c.alignment) + ", " + std::to_string(c.chunks) + " chunks, " +
                 std::to_string(c.message) + " bytes");
    const BufferLayout layout(layoutPlan("allreduce", 2, c.chunks, c.alignment), c.message);
    EXPECT_EQ(layout.chunkBytes(), c.chunkBytes);
    EXPECT_EQ(layout.alignment(), std::max<uint64_t>(c.alignment, 16));
  }
}

TEST(BufferLayoutTest, PositionsOfInputOutputAndScratchChunks) {
  // 1000 bytes in 2 chunks: chunk 0 is bytes 0-511, chunk 1 bytes 512-999 (488 bytes).
  const BufferLayout layout(layoutPlan("allreduce", 2, 2), 1000);
  ASSERT_EQ(layout.chunkBytes(), 512u);
  EXPECT_EQ(layout.inputBytes(), 1000u);
  EXPECT_EQ(layout.outputBytes(), 1000u);
  for (BufferType buffer : {BufferType::kInput, BufferType::kOutput}) {
    SCOPED_TRACE(bufferName(buffer));
    EXPECT_EQ(layout.position(buffer, 0, 0), 0u);
    EXPECT_EQ(layout.position(buffer, 0, 100), 100u);
    EXPECT_EQ(layout.position(buffer, 0, 600), 600u);  // a range from chunk 0 runs on into chunk 1
    EXPECT_EQ(layout.position(buffer, 1, 0), 512u);
    EXPECT_EQ(layout.position(buffer, 1, 487), 999u);
    // Past the end of the short chunk: its end, never beyond the buffer.
    EXPECT_EQ(layout.position(buffer, 1, 488), 1000u);
    EXPECT_EQ(layout.position(buffer, 1, 512), 1000u);
    EXPECT_EQ(layout.position(buffer, 0, 1024), 1000u);
  }
  // Scratch chunks are always whole.
  EXPECT_EQ(layout.position(BufferType::kScratch, 0, 0), 0u);
  EXPECT_EQ(layout.position(BufferType::kScratch, 1, 500), 1012u);
  EXPECT_EQ(layout.position(BufferType::kScratch, 2, 0), 1024u);
  EXPECT_EQ(layout.position(BufferType::kScratch, 1, 1024), 1536u);
}

TEST(BufferLayoutTest, ScratchIsWholeChunksAndLLScratchIsPacketsInTwoHalves) {
  const BufferLayout simple(layoutPlan("allreduce", 2, 2), 1000);
  EXPECT_EQ(simple.scratchHalfBytes(3), 3u * 512);
  EXPECT_EQ(simple.scratchBytes(3), 3u * 512);
  EXPECT_EQ(simple.scratchBytes(0), 0u);
  // LL: 16 bytes of packets per 8 bytes of data, and one half per call parity.
  const BufferLayout ll(layoutPlan("allreduce", 2, 2, 16, "ll"), 1000);
  EXPECT_EQ(ll.chunkBytes(), 512u);
  EXPECT_EQ(ll.scratchHalfBytes(3), 3u * 512 * 2);
  EXPECT_EQ(ll.scratchBytes(3), 3u * 512 * 4);
}

TEST(BufferLayoutTest, AllGatherOutputHoldsOneSlotPerRank) {
  // 4 ranks, 2 chunks per slot: output chunk 2r + i is where rank r's input chunk i belongs.
  const BufferLayout layout(layoutPlan("allgather", 4, 2), 1000);
  EXPECT_EQ(layout.shape(BufferType::kInput).slots, 1u);
  EXPECT_EQ(layout.shape(BufferType::kOutput).slots, 4u);
  EXPECT_EQ(layout.shape(BufferType::kOutput).chunksPerSlot, 2u);
  EXPECT_EQ(layout.shape(BufferType::kOutput).slotBytes, 1000u);
  EXPECT_EQ(layout.inputBytes(), 1000u);
  EXPECT_EQ(layout.outputBytes(), 4000u);
  EXPECT_EQ(layout.chunkBytes(), 512u);
  EXPECT_EQ(layout.position(BufferType::kOutput, 1, 0), 512u);
  EXPECT_EQ(layout.position(BufferType::kOutput, 2, 0), 1000u);  // slot 1 starts where slot 0 ends
  EXPECT_EQ(layout.position(BufferType::kOutput, 3, 0), 1512u);
  EXPECT_EQ(layout.position(BufferType::kOutput, 5, 488), 3000u);  // the end of slot 2
  EXPECT_EQ(layout.position(BufferType::kOutput, 7, 512), 4000u);
  EXPECT_EQ(layout.position(BufferType::kInput, 1, 512), 1000u);
}

TEST(BufferLayoutTest, ReduceScatterInputHoldsOneSlotPerRank) {
  // The message is one rank's input: 4 slots of 250 bytes, each cut into 2 chunks of 128 bytes.
  const BufferLayout layout(layoutPlan("reducescatter", 4, 2), 1000);
  EXPECT_EQ(layout.shape(BufferType::kInput).slots, 4u);
  EXPECT_EQ(layout.shape(BufferType::kOutput).slots, 1u);
  EXPECT_EQ(layout.shape(BufferType::kInput).slotBytes, 250u);
  EXPECT_EQ(layout.inputBytes(), 1000u);
  EXPECT_EQ(layout.outputBytes(), 250u);
  EXPECT_EQ(layout.chunkBytes(), 128u);
  EXPECT_EQ(layout.position(BufferType::kInput, 1, 0), 128u);
  EXPECT_EQ(layout.position(BufferType::kInput, 2, 0), 250u);
  EXPECT_EQ(layout.position(BufferType::kInput, 7, 0), 878u);
  EXPECT_EQ(layout.position(BufferType::kInput, 7, 128), 1000u);
  EXPECT_EQ(layout.position(BufferType::kOutput, 1, 128), 250u);
}

TEST(BufferLayoutTest, AllToAllBuffersBothHoldOneSlotPerRank) {
  const BufferLayout layout(layoutPlan("alltoall", 2, 1), 1000);
  EXPECT_EQ(layout.shape(BufferType::kInput).slots, 2u);
  EXPECT_EQ(layout.shape(BufferType::kOutput).slots, 2u);
  EXPECT_EQ(layout.inputBytes(), 1000u);
  EXPECT_EQ(layout.outputBytes(), 1000u);
  EXPECT_EQ(layout.chunkBytes(), 512u);
  EXPECT_EQ(layout.position(BufferType::kOutput, 1, 0), 500u);
  EXPECT_EQ(layout.position(BufferType::kOutput, 0, 512), 500u);
}

// Chunk j of a slot covers [j·c, min((j+1)·c, s)) of it (docs/plan-format.md), so the chunks of a
// buffer, one after another, tile [0, buffer bytes) with no gap and no overlap.
TEST(BufferLayoutTest, ChunksTileEveryBufferExactlyForOddSizes) {
  struct Shape {
    const char* collective;
    uint32_t world;
  };
  for (const Shape& shape :
       {Shape{"allreduce", 2}, Shape{"allgather", 3}, Shape{"reducescatter", 3}, Shape{"alltoall", 3}}) {
    for (uint32_t k : {1u, 2u, 3u, 7u, 8u}) {
      for (uint32_t alignment : {16u, 64u}) {
        const Plan plan = layoutPlan(shape.collective, shape.world, k, alignment);
        const std::string collective = shape.collective;
        const uint32_t inputSlots = collective == "reducescatter" || collective == "alltoall" ? shape.world : 1;
        for (uint64_t slotBytes : kOddSizes) {
          SCOPED_TRACE(std::string(shape.collective) + ", " + std::to_string(k) + " chunks per slot, alignment " +
                       std::to_string(alignment) + ", " + std::to_string(slotBytes) + "-byte slots");
          const BufferLayout layout(plan, slotBytes * inputSlots);
          const uint64_t c = layout.chunkBytes();
          EXPECT_EQ(c, std::max<uint64_t>(roundUp((slotBytes + k - 1) / k, alignment), alignment));
          for (BufferType buffer : {BufferType::kInput, BufferType::kOutput}) {
            const BufferShape& s = layout.shape(buffer);
            ASSERT_EQ(s.slotBytes, slotBytes);
            ASSERT_EQ(s.chunksPerSlot, k);
            uint64_t end = 0;
            for (uint32_t j = 0; j < s.slots * k; ++j) {
              const uint64_t begin = layout.position(buffer, j, 0);
              const uint64_t slot = j / k, i = j % k;
              ASSERT_EQ(begin, end) << bufferName(buffer) << " chunk " << j << " leaves a gap or overlaps";
              ASSERT_EQ(begin, slot * slotBytes + std::min(i * c, slotBytes)) << bufferName(buffer) << " chunk " << j;
              end = layout.position(buffer, j, c);
              ASSERT_EQ(end, slot * slotBytes + std::min((i + 1) * c, slotBytes))
                  << bufferName(buffer) << " chunk " << j;
            }
            EXPECT_EQ(end, s.bytes()) << bufferName(buffer);
          }
        }
      }
    }
  }
}

TEST(BufferLayoutTest, AMessageThatDoesNotCutIntoTheInputSlotsIsRefused) {
  const Plan reduceScatter = layoutPlan("reducescatter", 4, 1);
  const std::string message =
      "message bytes: plan 'resolve_test' (reducescatter) cuts the input into 4 equal pieces, but 1002 bytes do not "
      "divide by 4";
  expectError([&] { BufferLayout(reduceScatter, 1002); }, ErrorCategory::kInvalidArgument, message);
  // resolve() makes the same check before anything else.
  expectError([&] { resolve(reduceScatter, 0, 1002); }, ErrorCategory::kInvalidArgument, message);
  EXPECT_EQ(BufferLayout(reduceScatter, 1004).shape(BufferType::kInput).slotBytes, 251u);

  expectError([&] { BufferLayout(layoutPlan("alltoall", 3, 1), 1000); }, ErrorCategory::kInvalidArgument,
              "message bytes: plan 'resolve_test' (alltoall) cuts the input into 3 equal pieces, but 1000 bytes do "
              "not divide by 3");
  // One-slot inputs take any size.
  EXPECT_EQ(BufferLayout(layoutPlan("allgather", 4, 1), 1001).outputBytes(), 4004u);
}

TEST(ResolveTest, PutOverAMemoryChannelIsOneTransferToThePeer) {
  const Plan plan = twoRanks(R"({"op": "put", "src": {"buffer": "input", "index": 1},
                   "dsts": [{"channel": 0, "buffer": "scratch", "index": 0}]})")
                        .parse();
  const ResolvedProgram program = resolve(plan, 0, 1000);
  EXPECT_EQ(describe(program), std::vector<std::string>{"transfer bytes=488 (op 0): local:input+512 -> ch0:scratch+0"});
  EXPECT_EQ(program.ops[0].srcs, 1u);
  EXPECT_EQ(program.ops[0].dsts, 1u);
  EXPECT_EQ(operand(program, program.ops[0], 0).channel, device::kLocalOperand);
  EXPECT_EQ(operand(program, program.ops[0], 1).buffer, uint8_t(BufferType::kScratch));
  EXPECT_EQ(program.blockOps, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(program.blocks(), 1u);
  EXPECT_EQ(program.inputBytes, 1000u);
  EXPECT_EQ(program.outputBytes, 1000u);
  EXPECT_EQ(program.scratchBytes, 2u * 512);
  EXPECT_TRUE(program.semaphoreInitialValues.empty());
  EXPECT_EQ(program.barriers, 0u);
}

// A send with one source per destination (srcs paired with dsts) resolves to what the separate sends
// would: one transfer (or trigger) per pair, in order; only the plan op they name differs.
TEST(ResolveTest, ASendWithPairedSourcesIsTheSeparateSendsInOrder) {
  const auto withoutOpIndex = [](std::vector<std::string> lines) {
    for (std::string& line : lines) line = std::regex_replace(line, std::regex(R"( \(op \d+\))"), "");
    return lines;
  };
  struct Case {
    std::string op, channelType, protocol, buffer;
  };
  for (const Case& c : {Case{"put", "memory", "simple", "output"}, Case{"put", "port", "simple", "output"},
                        Case{"put_packet", "memory", "ll", "scratch"}, Case{"put_packet", "port", "ll", "scratch"}}) {
    SCOPED_TRACE(c.op + " over " + c.channelType);
    const std::string dst0 = R"({"channel": 0, "buffer": ")" + c.buffer + R"(", "index": 1})";
    const std::string dst1 = R"({"channel": 0, "buffer": ")" + c.buffer + R"(", "index": 0})";
    const std::string in0 = R"({"buffer": "input", "index": 0})", in1 = R"({"buffer": "input", "index": 1})";
    const Plan separate = twoRanks(R"({"op": ")" + c.op + R"(", "src": )" + in0 + R"(, "dsts": [)" + dst0 + R"(]},
                                      {"op": ")" + c.op + R"(", "src": )" + in1 + R"(, "dsts": [)" + dst1 + "]}",
                                   c.channelType, c.protocol)
                              .parse();
    const Plan paired = twoRanks(R"({"op": ")" + c.op + R"(", "srcs": [)" + in0 + ", " + in1 + R"(], "dsts": [)" +
                                     dst0 + ", " + dst1 + "]}",
                                 c.channelType, c.protocol)
                            .parse();
    const std::vector<std::string> expected = withoutOpIndex(describe(resolve(separate, 0, 1024)));
    EXPECT_EQ(withoutOpIndex(describe(resolve(paired, 0, 1024))), expected);
    EXPECT_GE(expected.size(), 2u);
  }
}

TEST(ResolveTest, ChannelOperandsAreTheChannelsPositionNotItsId) {
  PlanText text = twoRanks("");
  text.ranks[0].channels = channel(7, "memory", 1) + ", " + channel(3, "memory", 1);
  text.ranks[1].channels = channel(0, "memory", 0) + ", " + channel(1, "memory", 0);
  text.ranks[0].threadblocks = threadblock(0, R"(
      {"op": "put", "src": {"buffer": "input", "index": 0}, "dsts": [{"channel": 3, "buffer": "output", "index": 0}]},
      {"op": "signal", "channels": [3, 7]}, {"op": "wait", "channels": [7]})");
  EXPECT_EQ(describe(resolve(text.parse(), 0, 1000)), (std::vector<std::string>{
                                                          "transfer bytes=512 (op 0): local:input+0 -> ch1:output+0",
                                                          "signal sync_before sync_after (op 1): ch1, ch0",
                                                          "wait sync_before sync_after (op 2): ch0",
                                                      }));
}

TEST(ResolveTest, ReductionsCombineTheirSourcesAndCopiesDoNot) {
  const Plan plan = twoRanks(R"(
      {"op": "reduce", "reduce_op": "sum", "srcs": [{"buffer": "input", "index": 1}, {"buffer": "scratch", "index": 1}],
       "dst": {"buffer": "output", "index": 1}},
      {"op": "copy", "src": {"buffer": "input", "index": 0}, "dst": {"buffer": "output", "index": 0}},
      {"op": "get", "src": {"channel": 0, "buffer": "input", "index": 1}, "dst": {"buffer": "scratch", "index": 0}},
      {"op": "read_reduce", "reduce_op": "max",
       "srcs": [{"buffer": "input", "index": 0}, {"channel": 0, "buffer": "input", "index": 0}],
       "dst": {"buffer": "output", "index": 0}},
      {"op": "reduce_send", "reduce_op": "sum", "srcs": [{"buffer": "input", "index": 0}, {"buffer": "scratch", "index": 0}],
       "dst": {"buffer": "output", "index": 0}, "dsts": [{"channel": 0, "buffer": "output", "index": 0}]})")
                        .parse();
  EXPECT_EQ(describe(resolve(plan, 0, 1000)),
            (std::vector<std::string>{
                "transfer reduces bytes=488 (op 0): local:input+512, local:scratch+512 -> local:output+512",
                "transfer bytes=512 (op 1): local:input+0 -> local:output+0",
                // The peer's short chunk 1 sets the length; scratch chunks are whole and never limit it.
                "transfer bytes=488 (op 2): ch0:input+512 -> local:scratch+0",
                "transfer reduces bytes=512 (op 3): local:input+0, ch0:input+0 -> local:output+0",
                "transfer reduces bytes=512 (op 4): local:input+0, local:scratch+0 -> local:output+0, ch0:output+0",
            }));
}

TEST(ResolveTest, APipelineIsUnrolledIterationByIteration) {
  // 1000 bytes, 2 chunks of 512: the nominal range is 1024 bytes, a third of it 342, up to 352. Body ops
  // keep the pipeline's index as their plan op.
  const Plan plan = twoRanks(R"({"op": "nop"}, {"op": "pipeline", "iterations": 3, "body": [
      {"op": "put", "src": {"buffer": "input", "index": 0, "count": 2},
       "dsts": [{"channel": 0, "buffer": "output", "index": 0, "count": 2}]},
      {"op": "signal", "channels": [0]}]})")
                        .parse();
  EXPECT_EQ(describe(resolve(plan, 0, 1000)), (std::vector<std::string>{
                                                  "nop sync_before (op 0)",
                                                  "transfer bytes=352 (op 1): local:input+0 -> ch0:output+0",
                                                  "signal sync_before sync_after (op 1): ch0",
                                                  "transfer bytes=352 (op 1): local:input+352 -> ch0:output+352",
                                                  "signal sync_before sync_after (op 1): ch0",
                                                  "transfer bytes=296 (op 1): local:input+704 -> ch0:output+704",
                                                  "signal sync_before sync_after (op 1): ch0",
                                              }));
}

// Whatever the size and the number of iterations, the slices of a data range follow one another and
// cover exactly the bytes the range has without a pipeline; scratch slices step through the nominal
// range in alignment-rounded steps, so they line up with the data slices.
TEST(ResolveTest, PipelineSlicesAreContiguousAndCoverTheRangeForOddSizes) {
  for (uint32_t iterations : {1u, 2u, 3u, 5u, 8u, 64u}) {
    PlanText text = twoRanks(R"({"op": "pipeline", "iterations": )" + std::to_string(iterations) + R"(, "body": [
        {"op": "reduce", "reduce_op": "sum",
         "srcs": [{"buffer": "input", "index": 1, "count": 2}, {"buffer": "scratch", "index": 0, "count": 2}],
         "dst": {"buffer": "output", "index": 1, "count": 2}}]})");
    for (RankText& rank : text.ranks) rank.inputChunks = rank.outputChunks = rank.scratchChunks = 3;
    const Plan plan = text.parse();
    for (uint64_t message : kOddSizes) {
      SCOPED_TRACE(std::to_string(iterations) + " iterations, " + std::to_string(message) + " bytes");
      const ResolvedProgram program = resolve(plan, 0, message);
      ASSERT_EQ(program.ops.size(), iterations);
      // Chunks 1 and 2 of 3: bytes [min(c, m), m) of the message.
      const uint64_t c = std::max<uint64_t>(roundUp((message + 2) / 3, 16), 16);
      const uint64_t nominal = 2 * c;
      const uint64_t slice = roundUp((nominal + iterations - 1) / iterations, 16);
      uint64_t end = std::min(c, message);
      for (uint32_t i = 0; i < iterations; ++i) {
        const device::Op& op = program.ops[i];
        SCOPED_TRACE("iteration " + std::to_string(i) + ": " + describe(program, op));
        ASSERT_EQ(op.code, OpCode::kTransfer);
        EXPECT_EQ(op.flags, device::kOpReduces);
        ASSERT_EQ(op.srcs, 2u);
        ASSERT_EQ(op.dsts, 1u);
        EXPECT_EQ(operand(program, op, 0).offset, end);  // input: right after the previous slice
        EXPECT_EQ(operand(program, op, 2).offset, end);  // output: cut alike
        EXPECT_EQ(operand(program, op, 1).offset, std::min<uint64_t>(i * slice, nominal));  // scratch: nominal
        EXPECT_LE(op.bytes, slice);
        end += op.bytes;
      }
      EXPECT_EQ(end, message);
    }
  }
}

// A pipeline sized in bytes (MSCCL++'s unit): iteration i covers bytes [i * unit, (i + 1) * unit) of
// every range, as many iterations as the longest range needs; a shorter range's later slices are empty.
TEST(ResolveTest, APipelineSizedInBytesCutsEveryRangeIntoUnits) {
  // 1000 bytes, 2 chunks of 512: the put's range is 1024 nominal bytes, the copy's 512; units of 400.
  const Plan plan = twoRanks(R"({"op": "pipeline", "unit_bytes": 400, "body": [
      {"op": "put", "src": {"buffer": "input", "index": 0, "count": 2},
       "dsts": [{"channel": 0, "buffer": "output", "index": 0, "count": 2}]},
      {"op": "copy", "src": {"buffer": "input", "index": 0}, "dst": {"buffer": "scratch", "index": 0}}]})")
                        .parse();
  EXPECT_EQ(describe(resolve(plan, 0, 1000)), (std::vector<std::string>{
                                                  "transfer bytes=400 (op 0): local:input+0 -> ch0:output+0",
                                                  "transfer bytes=400 (op 0): local:input+0 -> local:scratch+0",
                                                  "transfer bytes=400 (op 0): local:input+400 -> ch0:output+400",
                                                  "transfer bytes=112 (op 0): local:input+400 -> local:scratch+400",
                                                  "transfer bytes=200 (op 0): local:input+800 -> ch0:output+800",
                                                  "transfer bytes=0 (op 0): local:input+512 -> local:scratch+512",
                                              }));
}

TEST(ResolveTest, APipelineUnitIsRoundedUpToTheAlignmentAndItsIterationsAreBounded) {
  PlanText text = twoRanks(R"({"op": "pipeline", "unit_bytes": 16, "body": [
      {"op": "copy", "src": {"buffer": "input", "index": 0}, "dst": {"buffer": "output", "index": 0}}]})");
  text.alignmentBytes = 64;
  const ResolvedProgram program = resolve(text.parse(), 0, 256);  // chunks of 128 bytes: two 64-byte units
  ASSERT_EQ(program.ops.size(), 2u);
  EXPECT_EQ(program.ops[0].bytes, 64u);
  EXPECT_EQ(operand(program, program.ops[1], 0).offset, 64u);
  const Plan plan = text.parse();
  expectError([&] { resolve(plan, 0, uint64_t{1} << 30); },  // 512 MiB chunks in 64-byte units
              ErrorCategory::kInvalidArgument,
              "plan 'resolve_test', rank 0, tb 0, op 0 (pipeline): a pipeline of 16-byte units over 536870912 bytes "
              "would run 8388608 iterations, more than 65536; use a larger unit_bytes");
}

TEST(ResolveTest, DataRangesOfUnequalLengthAreRefusedNamingPlanRankTbAndOp) {
  // Input chunk 1 of a 1000-byte message is 488 bytes, output chunk 0 is 512: nothing is truncated.
  PlanText text = twoRanks("");
  text.ranks[0].threadblocks = threadblock(0, R"({"op": "nop"})") + ", " + threadblock(3, R"({"op": "nop"},
      {"op": "copy", "src": {"buffer": "input", "index": 1}, "dst": {"buffer": "output", "index": 0}})");
  const Plan plan = text.parse();
  expectError([&] { resolve(plan, 0, 1000); }, ErrorCategory::kInvalidArgument,
              "plan 'resolve_test', rank 0, tb 3, op 1 (copy): its data ranges cover 488 and 512 bytes for a 1000-byte "
              "message; the ranges of one op must be equally long (nothing is truncated)");
  // Where the chunks are equal, the same plan resolves.
  EXPECT_EQ(describeBlock(resolve(plan, 0, 1024), 1),
            (std::vector<std::string>{"nop sync_before (op 0)",
                                      "transfer bytes=512 (op 1): local:input+512 -> local:output+0"}));
}

TEST(ResolveTest, UnequalRangesInAPipelineNameThePipelinesOp) {
  const Plan plan = twoRanks(R"({"op": "nop"}, {"op": "nop"}, {"op": "pipeline", "iterations": 2, "body": [
      {"op": "put", "src": {"buffer": "input", "index": 0}, "dsts": [{"channel": 0, "buffer": "output", "index": 1}]}]})")
                        .parse();
  // The second slice of chunk 0 is 256 bytes, that of the 488-byte chunk 1 only 232.
  expectError([&] { resolve(plan, 0, 1000); }, ErrorCategory::kInvalidArgument,
              "plan 'resolve_test', rank 0, tb 0, op 2 (put): its data ranges cover 256 and 232 bytes for a 1000-byte "
              "message; the ranges of one op must be equally long (nothing is truncated)");
}

TEST(ResolveTest, LLScratchOperandsArePacketsAtTwiceTheOffsetWithTheOwnersHalfAsOddOffset) {
  // Rank 0 keeps 2 scratch chunks (halves of 2 x 512 x 2 = 2048 bytes), rank 1 keeps 3 (3072): a remote
  // operand takes the half size of the rank whose scratch it is.
  PlanText text = twoRanks(R"(
      {"op": "put_packet", "src": {"buffer": "input", "index": 1}, "dsts": [{"channel": 0, "buffer": "scratch", "index": 2}]},
      {"op": "unpack_packet", "src": {"buffer": "scratch", "index": 1}, "dst": {"buffer": "output", "index": 1}},
      {"op": "copy_packet", "src": {"buffer": "input", "index": 0}, "dst": {"buffer": "scratch", "index": 0}},
      {"op": "reduce_packet", "reduce_op": "sum", "src": {"buffer": "input", "index": 0},
       "srcs": [{"buffer": "scratch", "index": 1}], "dst": {"buffer": "output", "index": 0}},
      {"op": "pipeline", "iterations": 2, "body": [{"op": "put_packet", "src": {"buffer": "input", "index": 0},
       "dsts": [{"channel": 0, "buffer": "scratch", "index": 1}]}]})",
                           "memory", "ll");
  text.ranks[1].scratchChunks = 3;
  const Plan plan = text.parse();
  const ResolvedProgram program = resolve(plan, 0, 1000);
  EXPECT_EQ(describe(program),
            (std::vector<std::string>{
                "transfer bytes=488 (op 0): local:input+512 -> ch0:scratch+2048|odd+3072 packets",
                "transfer bytes=488 (op 1): local:scratch+1024|odd+2048 packets -> local:output+512",
                "transfer bytes=512 (op 2): local:input+0 -> local:scratch+0|odd+2048 packets",
                "transfer reduces bytes=512 (op 3): local:input+0, local:scratch+1024|odd+2048 packets -> "
                "local:output+0",
                // Pipeline slices of 256 data bytes: the second starts 512 packet bytes into the chunk.
                "transfer bytes=256 (op 4): local:input+0 -> ch0:scratch+1024|odd+3072 packets",
                "transfer bytes=256 (op 4): local:input+256 -> ch0:scratch+1536|odd+3072 packets",
            }));
  EXPECT_EQ(program.scratchBytes, 2u * 2048);
  EXPECT_EQ(resolve(plan, 1, 1000).scratchBytes, 2u * 3072);
}

TEST(ResolveTest, PutOverAPortChannelIsAProxyTriggerAfterTheBlocksWrites) {
  const Plan plan = twoRanks(R"(
      {"op": "put", "src": {"buffer": "input", "index": 0}, "dsts": [{"channel": 0, "buffer": "output", "index": 0}]},
      {"op": "put_with_signal", "src": {"buffer": "input", "index": 1},
       "dsts": [{"channel": 0, "buffer": "output", "index": 1}]},
      {"op": "put_with_signal_and_flush", "src": {"buffer": "input", "index": 0},
       "dsts": [{"channel": 0, "buffer": "scratch", "index": 1}]},
      {"op": "flush", "channels": [0]})",
                             "port")
                        .parse();
  EXPECT_EQ(describe(resolve(plan, 0, 1000)),
            (std::vector<std::string>{
                "port_put sync_before bytes=512 (op 0): local:input+0 -> ch0:output+0",
                "port_put sync_before port_signal bytes=488 (op 1): local:input+512 -> ch0:output+512",
                "port_put sync_before port_signal port_flush bytes=512 (op 2): local:input+0 -> ch0:scratch+512",
                "flush sync_before sync_after (op 3): ch0",
            }));
}

TEST(ResolveTest, APutToMemoryAndPortPeersCopiesFirstThenTriggers) {
  PlanText text = twoRanks(R"({"op": "put", "src": {"buffer": "input", "index": 1}, "dsts": [
      {"channel": 1, "buffer": "output", "index": 1}, {"channel": 0, "buffer": "scratch", "index": 0}]})");
  text.ranks[0].channels = channel(0, "memory", 1) + ", " + channel(1, "port", 1);
  text.ranks[1].channels = channel(0, "memory", 0) + ", " + channel(1, "port", 0);
  EXPECT_EQ(describe(resolve(text.parse(), 0, 1000)),
            (std::vector<std::string>{
                "transfer bytes=488 (op 0): local:input+512 -> ch0:scratch+0",
                "port_put sync_before bytes=488 (op 0): local:input+512 -> ch1:output+512",
                // The block ends: its unflushed put must leave the input before the caller may reuse it.
                "flush sync_before sync_after reads_only (op 0): ch1",
            }));
}

TEST(ResolveTest, AReductionSentOverAPortChannelIsStagedInItsDst) {
  const std::string srcs = R"("srcs": [{"buffer": "input", "index": 0}, {"buffer": "scratch", "index": 0}])";
  const std::string dsts = R"("dsts": [{"channel": 0, "buffer": "output", "index": 0}])";
  const Plan staged = twoRanks(R"({"op": "reduce_send", "reduce_op": "sum", )" + srcs +
                                   R"(, "dst": {"buffer": "output", "index": 0}, )" + dsts + "}",
                               "port")
                          .parse();
  EXPECT_EQ(describe(resolve(staged, 0, 1000)),
            (std::vector<std::string>{
                "transfer reduces bytes=512 (op 0): local:input+0, local:scratch+0 -> local:output+0",
                "port_put sync_before bytes=512 (op 0): local:output+0 -> ch0:output+0",
                "flush sync_before sync_after reads_only (op 0): ch0",
            }));
  // The proxy copies from this rank's memory, so without a dst the result has nowhere to wait.
  const Plan unstaged =
      twoRanks(R"({"op": "nop"}, {"op": "reduce_send", "reduce_op": "sum", )" + srcs + ", " + dsts + "}", "port")
          .parse();
  expectError([&] { resolve(unstaged, 0, 1000); }, ErrorCategory::kInvalidPlan,
              "plan 'resolve_test', rank 0, tb 0, op 1 (reduce_send): a reduction sent over a port channel needs a "
              "local dst to stage its result");
}

// A block whose puts on a port channel are all flushed (by the put itself or a later flush) gets no
// flush at its end; one that puts on two channels and flushes one gets a flush of the other.
TEST(ResolveTest, ABlockEndsWithAFlushOfThePortChannelsItPutOnSinceTheirLastFlush) {
  const std::string put0 = R"({"op": "put", "src": {"buffer": "input", "index": 0},
      "dsts": [{"channel": 0, "buffer": "output", "index": 0}]})";
  const std::string put1 = R"({"op": "put", "src": {"buffer": "input", "index": 1},
      "dsts": [{"channel": 1, "buffer": "output", "index": 1}]})";
  PlanText text = twoRanks(put0 + ", " + put1 + R"(, {"op": "flush", "channels": [0]})", "port");
  text.ranks[0].channels = channel(0, "port", 1) + ", " + channel(1, "port", 1);
  text.ranks[1].channels = channel(0, "port", 0) + ", " + channel(1, "port", 0);
  std::vector<std::string> ops = describe(resolve(text.parse(), 0, 1000));
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[3], "flush sync_before sync_after reads_only (op 2): ch1");
  text.ranks[0].threadblocks = threadblock(0, put0 + R"(, {"op": "flush", "channels": [0]})");
  ops = describe(resolve(text.parse(), 0, 1000));
  EXPECT_EQ(ops.size(), 2u);
}

// Then a reads-only flush, not a full one: over TCP a full one waits a round trip for the peer's acknowledgement,
// where the staging area only has to be read before it is packed again.
TEST(ResolveTest, PacketsForAPortPeerArePackedIntoStagingThenSentAsWholePacketsAndTheirReadsFinished) {
  // 1003 bytes: chunk 1 is 491 bytes, 62 packets of 8 data bytes (the last one partial) = 992 packet bytes.
  PlanText text = twoRanks(R"({"op": "put_packet", "src": {"buffer": "input", "index": 1},
                               "dsts": [{"channel": 0, "buffer": "scratch", "index": 1}]})",
                           "port", "ll");
  text.ranks[1].scratchChunks = 3;
  EXPECT_EQ(describe(resolve(text.parse(), 0, 1003)),
            (std::vector<std::string>{
                "transfer bytes=491 (op 0): local:input+512 -> ch0:staging+1024|odd+3072 packets",
                "port_put sync_before bytes=992 (op 0): ch0:staging+1024|odd+3072 packets -> "
                "ch0:scratch+1024|odd+3072 packets",
                "flush sync_before sync_after reads_only (op 0): ch0",
            }));
}

TEST(ResolveTest, APacketReductionSentToMemoryAndPortPeersPacksOnceAndTriggersThePortCopy) {
  PlanText text = twoRanks(R"({"op": "reduce_send_packet", "reduce_op": "sum", "src": {"buffer": "input", "index": 0},
      "srcs": [{"buffer": "scratch", "index": 0}], "dst": {"buffer": "output", "index": 0},
      "dsts": [{"channel": 1, "buffer": "scratch", "index": 0}, {"channel": 0, "buffer": "scratch", "index": 1}]})",
                           "memory", "ll");
  text.ranks[0].channels = channel(0, "memory", 1) + ", " + channel(1, "port", 1);
  text.ranks[1].channels = channel(0, "memory", 0) + ", " + channel(1, "port", 0);
  text.ranks[1].scratchChunks = 3;
  EXPECT_EQ(describe(resolve(text.parse(), 0, 1000)),
            (std::vector<std::string>{
                "transfer reduces bytes=512 (op 0): local:input+0, local:scratch+0|odd+2048 packets -> "
                "local:output+0, ch0:scratch+1024|odd+3072 packets, ch1:staging+0|odd+3072 packets",
                "port_put sync_before bytes=1024 (op 0): ch1:staging+0|odd+3072 packets -> "
                "ch1:scratch+0|odd+3072 packets",
                "flush sync_before sync_after reads_only (op 0): ch1",
            }));
}

TEST(ResolveTest, MultimemOpsOnASwitchChannelAreRefused) {
  const std::string group = R"({"id": 0, "type": "switch", "ranks": [0, 1], "buffer": "output"})";
  const std::string refusal =
      "switch channels (NVLS multicast) are not run by this executor; they stay opt-in and untested here";
  PlanText text = twoRanks(R"({"op": "multimem_reduce", "reduce_op": "sum",
      "src": {"channel": 0, "buffer": "output", "index": 0}, "dst": {"buffer": "output", "index": 0}})");
  text.ranks[0].channels = text.ranks[1].channels = group;
  expectError([&] { resolve(text.parse(), 0, 1000); }, ErrorCategory::kInvalidPlan,
              "plan 'resolve_test', rank 0, tb 0, op 0 (multimem_reduce): " + refusal);
  text.ranks[0].threadblocks = threadblock(0, R"({"op": "nop"}, {"op": "multimem_broadcast",
      "src": {"buffer": "input", "index": 1}, "dsts": [{"channel": 0, "buffer": "output", "index": 1}]})");
  expectError([&] { resolve(text.parse(), 0, 1000); }, ErrorCategory::kInvalidPlan,
              "plan 'resolve_test', rank 0, tb 0, op 1 (multimem_broadcast): " + refusal);
}

TEST(ResolveTest, TwoThreadBlocksWaitingOnOneChannelAreRefused) {
  // Thread blocks resolve in id order, whatever the order of the JSON: tb 0 claims channel 4 first.
  PlanText text = twoRanks("");
  text.ranks[0].channels = channel(4, "memory", 1);
  text.ranks[0].threadblocks = threadblock(1, R"({"op": "wait", "channels": [4]})") + ", " +
                               threadblock(0, R"({"op": "signal", "channels": [4]}, {"op": "wait", "channels": [4]})");
  expectError([&] { resolve(text.parse(), 0, 1000); }, ErrorCategory::kInvalidPlan,
              "plan 'resolve_test', rank 0, tb 1, op 0 (wait): channel 4 is also waited on by tb 0; the executor "
              "needs every channel's waits in one thread block");
  // One thread block may wait on a channel many times, and others may signal it.
  text.ranks[0].threadblocks = threadblock(1, R"({"op": "signal", "channels": [4]})") + ", " +
                               threadblock(0, R"({"op": "wait", "channels": [4]}, {"op": "wait", "channels": [4]})");
  EXPECT_EQ(resolve(text.parse(), 0, 1000).ops.size(), 3u);
}

TEST(ResolveTest, BlockOpsHasOneRunPerThreadBlockInIdOrder) {
  PlanText text = twoRanks("");
  text.ranks[0].threadblocks =
      threadblock(2, R"({"op": "nop"})") + ", " +
      threadblock(0, R"({"op": "signal", "channels": [0]}, {"op": "wait", "channels": [0]})") + ", " +
      threadblock(1, R"({"op": "copy", "src": {"buffer": "input", "index": 0}, "dst": {"buffer": "output", "index": 0}},
                        {"op": "copy", "src": {"buffer": "input", "index": 1}, "dst": {"buffer": "output", "index": 1}},
                        {"op": "nop"})");
  const ResolvedProgram program = resolve(text.parse(), 0, 1000);
  EXPECT_EQ(program.blockOps, (std::vector<uint32_t>{0, 2, 5, 6}));
  EXPECT_EQ(program.blocks(), 3u);
  EXPECT_EQ(describeBlock(program, 0), (std::vector<std::string>{"signal sync_before sync_after (op 0): ch0",
                                                                 "wait sync_before sync_after (op 1): ch0"}));
  EXPECT_EQ(describeBlock(program, 1), (std::vector<std::string>{
                                           "transfer bytes=512 (op 0): local:input+0 -> local:output+0",
                                           "transfer bytes=488 (op 1): local:input+512 -> local:output+512",
                                           "nop sync_before (op 2)",
                                       }));
  EXPECT_EQ(describeBlock(program, 2), std::vector<std::string>{"nop sync_before (op 0)"});
  // A rank with no thread blocks has an empty program.
  text.ranks[0].threadblocks = "";
  const ResolvedProgram empty = resolve(text.parse(), 0, 1000);
  EXPECT_EQ(empty.blockOps, std::vector<uint32_t>{0});
  EXPECT_EQ(empty.blocks(), 0u);
}

TEST(ResolveTest, SemaphoreInitialValuesAndBarrierCountsAreCarried) {
  // Semaphores are indexed by their position in the declaration, barriers by first appearance.
  PlanText text = twoRanks("");
  text.ranks[0].semaphores = R"({"id": 7, "initial_value": 3}, {"id": 2, "initial_value": 0})";
  text.ranks[0].threadblocks = threadblock(0, R"({"op": "sem_release", "semaphores": [2, 7]},
                        {"op": "barrier", "barrier_id": 9, "threadblocks": [0, 1, 2]},
                        {"op": "barrier", "barrier_id": 4, "threadblocks": [0, 1]})") +
                               ", " + threadblock(1, R"({"op": "sem_acquire", "semaphores": [7], "data_sync": "after"},
                        {"op": "barrier", "barrier_id": 9, "threadblocks": [0, 1, 2]},
                        {"op": "barrier", "barrier_id": 4, "threadblocks": [1, 0]})") +
                               ", " +
                               threadblock(2, R"({"op": "barrier", "barrier_id": 9, "threadblocks": [2, 1, 0]})");
  const ResolvedProgram program = resolve(text.parse(), 0, 1000);
  EXPECT_EQ(program.semaphoreInitialValues, (std::vector<uint64_t>{3, 0}));
  EXPECT_EQ(program.barriers, 2u);
  EXPECT_EQ(describe(program), (std::vector<std::string>{
                                   "sem_release sync_before sync_after (op 0): sem1, sem0",
                                   "barrier sync_before sync_after barrier=0 participants=3 (op 1)",
                                   "barrier sync_before sync_after barrier=1 participants=2 (op 2)",
                                   "sem_acquire sync_after (op 0): sem0",
                                   "barrier sync_before sync_after barrier=0 participants=3 (op 1)",
                                   "barrier sync_before sync_after barrier=1 participants=2 (op 2)",
                                   "barrier sync_before sync_after barrier=0 participants=3 (op 0)",
                               }));
}

TEST(ResolveTest, SyncOpsCarryRelaxedAndTheirDataSync) {
  PlanText text = twoRanks(R"(
      {"op": "signal", "channels": [0, 1], "relaxed": true, "data_sync": "before"},
      {"op": "wait", "channels": [1], "relaxed": true, "data_sync": "none"},
      {"op": "wait", "channels": [0], "data_sync": "after"},
      {"op": "signal", "channels": [1]},
      {"op": "nop"})");
  text.ranks[0].channels = channel(0, "memory", 1) + ", " + channel(1, "port", 1);
  text.ranks[1].channels = channel(0, "memory", 0) + ", " + channel(1, "port", 0);
  EXPECT_EQ(describe(resolve(text.parse(), 0, 1000)), (std::vector<std::string>{
                                                          "signal sync_before relaxed (op 0): ch0, ch1",
                                                          "wait relaxed (op 1): ch1",
                                                          "wait sync_after (op 2): ch0",
                                                          "signal sync_before sync_after (op 3): ch1",
                                                          "nop sync_before (op 4)",
                                                      }));
}

TEST(ResolveTest, ARankOutsideThePlanIsRefused) {
  const Plan plan = twoRanks(R"({"op": "nop"})").parse();
  expectError([&] { resolve(plan, 2, 1000); }, ErrorCategory::kInvalidArgument,
              "rank: plan 'resolve_test' has no program for rank 2 (world_size 2)");
}

// Where the byte at source offset `byte` lands, for each one-source, one-destination transfer that
// carries it.
std::vector<uint64_t> landings(const ResolvedProgram& program, uint64_t byte) {
  std::vector<uint64_t> out;
  for (const device::Op& op : program.ops) {
    if (op.code != OpCode::kTransfer || op.srcs != 1 || op.dsts != 1) continue;
    const device::Operand& src = operand(program, op, 0);
    if (byte >= src.offset && byte < src.offset + op.bytes)
      out.push_back(operand(program, op, 1).offset + byte - src.offset);
  }
  return out;
}

// A data range that crosses a slot boundary of a multi-slot buffer, where a slot is not a whole number
// of chunks: all-gather of 1000 bytes, 1 chunk per slot, c = 1008, output chunk 1 is bytes [1000, 2000).
// A put of output[0:2] into the peer's scratch[0:2] is cut at the gap, so output chunk 1 lands in its
// own scratch chunk (offset 1008), where ops naming scratch[1] and the symbolic verifier expect it;
// also inside pipelines, whose slices may end anywhere in a chunk.
TEST(ResolveTest, ChunksOfARangeAcrossSlotsLandInTheirOwnScratchChunks) {
  for (uint32_t iterations : {1u, 2u, 3u}) {
    SCOPED_TRACE(std::to_string(iterations) + " iteration(s)");
    const std::string put = R"({"op": "put", "src": {"buffer": "output", "index": 0, "count": 2},
        "dsts": [{"channel": 0, "buffer": "scratch", "index": 0, "count": 2}]})";
    PlanText text = twoRanks(iterations == 1 ? put
                                             : R"({"op": "pipeline", "iterations": )" + std::to_string(iterations) +
                                                   R"(, "body": [)" + put + "]}");
    text.collective = "allgather";
    for (RankText& rank : text.ranks) rank.inputChunks = 1;
    const ResolvedProgram program = resolve(text.parse(), 0, 1000);
    EXPECT_EQ(landings(program, 1000), std::vector<uint64_t>{1008});
    EXPECT_EQ(landings(program, 1999), std::vector<uint64_t>{2007});
  }
}

// An op whose ranges are all scratch moves whole chunks, but a short data chunk was written as fewer
// packets: LL allreduce of 1000 bytes over 3 ranks, 2 chunks (c = 512, input chunk 1 is 488 bytes), rank
// 0 put_packets input[1] into rank 1's scratch[0], rank 1 read_put_packets scratch[0] on to rank 2.
// Forwarding 512 bytes would poll for packets nobody writes, so such sizes are refused with the sizes
// that work; at 1024 bytes every chunk is whole and the forward moves it all.
TEST(ResolveTest, ForwardingPacketsBetweenScratchChunksNeedsWholeChunks) {
  PlanText text;
  text.protocol = "ll";
  text.ranks.resize(3);
  for (uint32_t r = 0; r < 3; ++r) text.ranks[r].id = r;
  text.ranks[0].channels = channel(0, "memory", 1);
  text.ranks[0].threadblocks = threadblock(0, R"({"op": "put_packet", "src": {"buffer": "input", "index": 1},
      "dsts": [{"channel": 0, "buffer": "scratch", "index": 0}]})");
  text.ranks[1].channels = channel(0, "memory", 0) + ", " + channel(1, "memory", 2);
  text.ranks[1].threadblocks = threadblock(0, R"({"op": "read_put_packet", "src": {"buffer": "scratch", "index": 0},
      "dsts": [{"channel": 1, "buffer": "scratch", "index": 1}]})");
  text.ranks[2].channels = channel(0, "memory", 1);
  text.ranks[2].threadblocks = threadblock(0, R"({"op": "unpack_packet", "src": {"buffer": "scratch", "index": 1},
      "dst": {"buffer": "output", "index": 1}})");
  const Plan plan = text.parse();
  EXPECT_EQ(resolve(plan, 0, 1000).ops.at(0).bytes, 488u);
  expectError([&] { resolve(plan, 1, 1000); }, ErrorCategory::kInvalidArgument,
              "plan 'resolve_test', rank 1, tb 0, op 0 (read_put_packet): it forwards LL packets between scratch "
              "chunks, which needs every data chunk whole, but a 1000-byte message leaves a short one; use a "
              "multiple of 32 bytes");
  EXPECT_EQ(resolve(plan, 1, 1024).ops.at(0).bytes, 512u);
  EXPECT_EQ(resolve(plan, 2, 1024).ops.at(0).bytes, 512u);
}

}  // namespace
}  // namespace loom
