// The fast path's choice (executor/src/specialize.cc): which resolved transfers get a specialised
// handler and which stay generic. That both paths compute the same bits is tested end to end on the
// CPU backend (tests/executor/test_fast_path.py).

#include "specialize.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/error.hpp"
#include "resolve.hpp"
#include "resolved_program_text.hpp"

namespace loom {
namespace {

using namespace test;  // NOLINT(google-build-using-namespace): the plan and program text helpers

std::vector<std::string> specialized(const Plan& plan, uint64_t bytes = 1024) {
  ResolvedProgram program = resolve(plan, 0, bytes);
  specialize(program);
  return describe(program);
}

const std::string kIn0 = R"({"buffer": "input", "index": 0})";
const std::string kIn1 = R"({"buffer": "input", "index": 1})";
const std::string kOut0 = R"({"buffer": "output", "index": 0})";

std::string peer(const std::string& buffer, int index, int channel = 0) {
  return R"({"channel": )" + std::to_string(channel) + R"(, "buffer": ")" + buffer + R"(", "index": )" +
         std::to_string(index) + "}";
}

TEST(SpecializeTest, APlainCopyBecomesTheVectorisedCopy) {
  const Plan plan = twoRanks(R"({"op": "put", "src": )" + kIn0 + R"(, "dsts": [)" + peer("output", 0) + "]}").parse();
  EXPECT_EQ(specialized(plan), std::vector<std::string>{"copy bytes=512 (op 0): local:input+0 -> ch0:output+0"});
}

TEST(SpecializeTest, PutsAndReductionsOfUpToEightOperandsBecomeFastTransfers) {
  PlanText text = twoRanks(R"({"op": "put", "src": )" + kIn0 + R"(, "dsts": [)" + peer("output", 0) + ", " +
                           peer("output", 1) + R"(]},
      {"op": "reduce", "reduce_op": "sum", "srcs": [)" +
                           kIn0 + ", " + kIn1 + R"(, {"buffer": "scratch", "index": 0}],
       "dst": )" + kOut0 + "}");
  EXPECT_EQ(specialized(text.parse()),
            (std::vector<std::string>{
                "fast_transfer bytes=512 packet_sources=0 (op 0): local:input+0 -> ch0:output+0, ch0:output+512",
                "fast_transfer reduces bytes=512 packet_sources=0 (op 1): local:input+0, local:input+512, "
                "local:scratch+0 -> local:output+0",
            }));
}

TEST(SpecializeTest, PacketSourcesAfterThePlainOnesAreCounted) {
  // LL: the packet reduction of an all-reduce (its own chunk plus a peer's packets, result kept and sent
  // as packets), a packet put, and an unpack (a packet source alone).
  PlanText text = twoRanks(R"({"op": "put_packet", "src": )" + kIn0 + R"(, "dsts": [)" + peer("scratch", 0) + R"(]},
      {"op": "reduce_send_packet", "reduce_op": "sum", "src": )" +
                               kIn1 +
                               R"(, "srcs": [{"buffer": "scratch", "index": 1}], "dst": {"buffer": "input", "index": 1},
       "dsts": [)" + peer("scratch", 1) +
                               R"(]},
      {"op": "unpack_packet", "src": {"buffer": "scratch", "index": 1}, "dst": )" +
                               kOut0 + "}",
                           "memory", "ll");
  const std::vector<std::string> lines = specialized(text.parse());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].substr(0, lines[0].find(" (")), "fast_transfer bytes=512 packet_sources=0");
  EXPECT_EQ(lines[1].substr(0, lines[1].find(" (")), "fast_transfer reduces bytes=512 packet_sources=1");
  EXPECT_EQ(lines[2].substr(0, lines[2].find(" (")), "fast_transfer bytes=512 packet_sources=1");
}

TEST(SpecializeTest, MoreThanEightSourcesOrDestinationsStayGeneric) {
  PlanText text = twoRanks("");
  text.ranks[0].inputChunks = text.ranks[0].outputChunks = text.ranks[1].inputChunks = text.ranks[1].outputChunks = 9;
  std::string nine, nineDsts;
  for (int i = 0; i < 9; ++i) {
    nine += std::string(i ? ", " : "") + R"({"buffer": "input", "index": )" + std::to_string(i) + "}";
    nineDsts += std::string(i ? ", " : "") + peer("output", i);
  }
  text.ranks[0].threadblocks =
      threadblock(0, R"({"op": "reduce", "reduce_op": "max", "srcs": [)" + nine + R"(], "dst": )" + kOut0 + R"(},
      {"op": "put", "src": )" +
                         kIn0 + R"(, "dsts": [)" + nineDsts + "]}");
  const std::vector<std::string> lines = specialized(text.parse(), 9 * 16);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].substr(0, lines[0].find(" (")), "transfer reduces bytes=16");
  EXPECT_EQ(lines[1].substr(0, lines[1].find(" (")), "transfer bytes=16");
}

TEST(SpecializeTest, ProxyTriggersAndSyncOpsAreLeftAlone) {
  const Plan plan = twoRanks(R"({"op": "put_with_signal", "src": )" + kIn0 + R"(, "dsts": [)" + peer("output", 0) +
                                 R"(]}, {"op": "wait", "channels": [0]})",
                             "port")
                        .parse();
  ResolvedProgram program = resolve(plan, 0, 1024);
  const std::vector<std::string> before = describe(program);
  specialize(program);
  EXPECT_EQ(describe(program), before);
}

// At odd sizes (short last chunks, a partial last unit), in and out of place, and in LL plans whose
// scratch operands alternate halves: specialisation changes op codes only, never an operand or a count,
// and every data op of these shapes specialises.
TEST(SpecializeTest, OnlyOpCodesChangeAtOddSizesInAndOutOfPlaceAndInLLPlans) {
  PlanText simple =
      twoRanks(R"({"op": "put", "src": )" + kIn1 + R"(, "dsts": [)" + peer("output", 1) + R"(]},
      {"op": "reduce", "reduce_op": "sum", "srcs": [)" +
               kIn1 + R"(, {"buffer": "scratch", "index": 1}], "dst": {"buffer": "output", "index": 1}})");
  PlanText inplace = simple;
  inplace.inplace = true;
  // (A packet put of another chunk than the reduction's: no one-shot pair, tested below.)
  PlanText ll = twoRanks(R"({"op": "put_packet", "src": )" + kIn0 + R"(, "dsts": [)" + peer("scratch", 0) + R"(]},
      {"op": "reduce_packet", "reduce_op": "sum", "src": )" +
                             kIn1 + R"(, "srcs": [{"buffer": "scratch", "index": 1}],
       "dst": {"buffer": "output", "index": 1}})",
                         "memory", "ll");
  for (const PlanText* text : {&simple, &inplace, &ll}) {
    const Plan plan = text->parse();
    for (uint64_t bytes :
         {uint64_t{1}, uint64_t{15}, uint64_t{17}, uint64_t{1000}, uint64_t{4100}, (uint64_t{1} << 20) + 3}) {
      SCOPED_TRACE(std::to_string(bytes) + " bytes, " + text->protocol + (text->inplace ? ", in place" : ""));
      const ResolvedProgram before = resolve(plan, 0, bytes);
      ResolvedProgram after = before;
      specialize(after);
      ASSERT_EQ(after.ops.size(), before.ops.size());
      for (size_t i = 0; i < before.ops.size(); ++i) {
        const device::Op &was = before.ops[i], &is = after.ops[i];
        EXPECT_EQ(is.bytes, was.bytes);
        EXPECT_EQ(is.first, was.first);
        EXPECT_EQ(is.flags, was.flags);
        if (was.code == OpCode::kTransfer) {
          EXPECT_NE(is.code, OpCode::kTransfer) << "op " << i << " stayed generic";
        }
      }
      ASSERT_EQ(after.operands.size(), before.operands.size());
      for (size_t i = 0; i < before.operands.size(); ++i) {
        EXPECT_EQ(operandText(after.operands[i]), operandText(before.operands[i]));
      }
    }
  }
}

// The LL one-shot all-reduce's pair: put the chunk's packets to the peer, then reduce the peer's
// packets of the chunk with it. Fused into one op whose sources are the chunk and the packets, and whose
// destinations are the reduction's, then the put's (which get the chunk as it is).
const std::string kOneShotPair = R"({"op": "put_packet", "src": )" + kIn1 + R"(, "dsts": [)" + peer("scratch", 1) +
                                 R"(]},
    {"op": "reduce_packet", "reduce_op": "sum", "src": )" +
                                 kIn1 + R"(, "srcs": [{"buffer": "scratch", "index": 1}],
     "dst": {"buffer": "output", "index": 1}})";

TEST(SpecializeTest, AnLLOneShotPairFusesIntoOneOp) {
  for (bool inplace : {false, true}) {
    for (uint64_t bytes : {uint64_t{17}, uint64_t{1000}, uint64_t{4100}}) {
      SCOPED_TRACE(std::to_string(bytes) + " bytes" + (inplace ? ", in place" : ""));
      PlanText text = twoRanks(kOneShotPair, "memory", "ll");
      text.inplace = inplace;
      const Plan plan = text.parse();
      const ResolvedProgram before = resolve(plan, 0, bytes);
      ResolvedProgram after = before;
      specialize(after);
      ASSERT_EQ(before.ops.size(), 2u);
      ASSERT_EQ(after.ops.size(), 1u);
      const device::Op& fused = after.ops[0];
      EXPECT_EQ(fused.code, OpCode::kOneShot);
      EXPECT_EQ(fused.bytes, before.ops[1].bytes);
      EXPECT_EQ(fused.planOp, 1u);  // the reduction's: a wait for the peer's packets names it
      EXPECT_EQ(fused.srcs, 2);
      EXPECT_EQ(fused.packetSources, 1u);
      EXPECT_EQ(fused.dsts, 2);
      EXPECT_EQ(fused.inputDestinations, 1u);
      EXPECT_EQ(after.blockOps, (std::vector<uint32_t>{0, 1}));
      const std::vector<std::string> expected{
          operandText(before.operands[before.ops[1].first]),      // the chunk
          operandText(before.operands[before.ops[1].first + 1]),  // the peer's packets
          operandText(before.operands[before.ops[1].first + 2]),  // the reduction's result
          operandText(before.operands[before.ops[0].first + 1]),  // the chunk's packets at the peer
      };
      std::vector<std::string> got;
      for (uint32_t i = 0; i < 4; ++i) got.push_back(operandText(after.operands[fused.first + i]));
      EXPECT_EQ(got, expected);
    }
  }
}

TEST(SpecializeTest, AOneShotPairDoesNotFuseAcrossASyncOrWhenAnOpStaysGeneric) {
  PlanText synced = twoRanks(R"({"op": "put_packet", "src": )" + kIn1 + R"(, "dsts": [)" + peer("scratch", 1) +
                                 R"(]}, {"op": "nop"},
      {"op": "reduce_packet", "reduce_op": "sum", "src": )" +
                                 kIn1 + R"(, "srcs": [{"buffer": "scratch", "index": 1}],
       "dst": {"buffer": "output", "index": 1}})",
                             "memory", "ll");
  ResolvedProgram program = resolve(synced.parse(), 0, 1024);
  specialize(program);
  EXPECT_EQ(program.ops.size(), 3u);
  // A reduction of nine sources stays generic: the program runs in the generic kernel, which has no
  // one-shot handler, so its pair stays two ops.
  PlanText generic = twoRanks("", "memory", "ll");
  std::string nine;
  for (int i = 0; i < 9; ++i) nine += std::string(i ? ", " : "") + R"({"buffer": "scratch", "index": 0})";
  generic.ranks[0].threadblocks =
      threadblock(0, kOneShotPair + R"(, {"op": "reduce_packet", "reduce_op": "sum", "src": )" + kIn0 +
                         R"(, "srcs": [)" + nine + R"(], "dst": {"buffer": "output", "index": 0}})");
  program = resolve(generic.parse(), 0, 1024);
  specialize(program);
  ASSERT_EQ(program.ops.size(), 3u);
  EXPECT_EQ(program.ops[2].code, OpCode::kTransfer);
  EXPECT_EQ(program.ops[0].code, OpCode::kFastTransfer);
}

// In place, the dependency pass puts a block sync between the put and the reduction (the reduction writes
// the chunk the put reads). Each thread of the fused op writes only units it read itself, so the pair
// fuses across that sync, and the fused op syncs before it instead (ops before the put stay ordered).
TEST(SpecializeTest, AnInPlaceOneShotPairFusesAcrossItsDependencySync) {
  const std::string put = R"({"op": "copy", "src": )" + kIn0 + R"(, "dst": {"buffer": "scratch", "index": 0}},
      {"op": "put_packet", "src": )" + kIn1 + R"(, "dsts": [)" + peer("scratch", 1) + R"(]}, {"op": "nop"},
      {"op": "reduce_packet", "reduce_op": "sum", "src": )" + kIn1 + R"(, "srcs": [{"buffer": "scratch", "index": 1}],
       "dst": )";
  PlanText inplace = twoRanks(put + kIn1 + "}", "memory", "ll");
  inplace.inplace = true;
  ResolvedProgram program = resolve(inplace.parse(), 0, 4096);
  ASSERT_EQ(program.ops.size(), 4u);
  specialize(program);
  ASSERT_EQ(program.ops.size(), 2u);
  EXPECT_EQ(program.ops[0].code, OpCode::kCopy);
  EXPECT_EQ(program.ops[1].code, OpCode::kOneShot);
  EXPECT_TRUE(program.ops[1].flags & device::kOpSyncBefore);
  EXPECT_EQ(program.blockOps, (std::vector<uint32_t>{0, 2}));
  // Into another chunk than the one the put reads, the sync orders something else: no fusion.
  PlanText other = twoRanks(put + kIn0 + "}", "memory", "ll");
  other.inplace = true;
  program = resolve(other.parse(), 0, 4096);
  specialize(program);
  EXPECT_EQ(program.ops.size(), 4u);
}

// The compiled library plan, as bundled: every block of the in-place LL all-reduce becomes one one-shot.
// Its file is the 2-rank one of the smallest messages, whatever range the tuned table gives it.
TEST(SpecializeTest, TheBundledInPlaceLLAllReduceRunsAsOneShots) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(LOOM_SOURCE_DIR) + "/plans/default")) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("allreduce_allpairs_packet_2r_0_") && name.ends_with("_inplace.json")) {
      found.push_back(entry.path().string());
    }
  }
  ASSERT_EQ(found.size(), 1u);
  const Plan plan = Plan::load(found[0]);
  ResolvedProgram program = resolve(plan, 0, 2048);
  specialize(program);
  ASSERT_EQ(program.ops.size(), program.blocks());
  for (const device::Op& op : program.ops) EXPECT_EQ(op.code, OpCode::kOneShot);
}

TEST(SpecializeTest, ASmallProgramLaunchesAThreadPerUnitInWholeWarps) {
  const Plan plan = twoRanks(R"({"op": "put", "src": )" + kIn0 + R"(, "dsts": [)" + peer("output", 0) + "]}").parse();
  // 2 chunks per rank: a message of n bytes moves n/2 in its one op, n/32 units of 16 bytes.
  for (const auto& [bytes, threads] : std::vector<std::pair<uint64_t, uint32_t>>{
           {32, 32}, {1024, 32}, {1040, 64}, {4096, 128}, {65536, 256}, {1 << 20, 256}}) {
    ResolvedProgram program = resolve(plan, 0, bytes);
    specialize(program);
    EXPECT_EQ(launchThreads(program, 256), threads) << bytes << " bytes";
  }
  ResolvedProgram syncOnly = resolve(twoRanks(R"({"op": "signal", "channels": [0]})").parse(), 0, 1024);
  EXPECT_EQ(launchThreads(syncOnly, 1024), 32u);  // a warp at least
}

TEST(SpecializeTest, LoomFastPathIsAStrictBooleanAndOnByDefault) {
  unsetenv("LOOM_FAST_PATH");
  EXPECT_TRUE(fastPathEnabled());
  setenv("LOOM_FAST_PATH", "1", 1);
  EXPECT_TRUE(fastPathEnabled());
  setenv("LOOM_FAST_PATH", "0", 1);
  EXPECT_FALSE(fastPathEnabled());
  setenv("LOOM_FAST_PATH", "fast", 1);
  try {
    fastPathEnabled();
    ADD_FAILURE() << "no error for LOOM_FAST_PATH=fast";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("LOOM_FAST_PATH"), std::string::npos) << error.what();
  }
  unsetenv("LOOM_FAST_PATH");
}

}  // namespace
}  // namespace loom
