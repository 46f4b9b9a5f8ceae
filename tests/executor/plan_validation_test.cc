// One test per semantic rule of plan_validation.cc: a small valid two-rank plan, changed in one place,
// is refused with the exact JSON path and message; the rule's allowed neighbours still pass.

#include <gtest/gtest.h>

#include <array>
#include <string>

#include "loom/error.hpp"
#include "loom/plan.hpp"

namespace loom {
namespace {

// Rank 0 puts its input chunk 1 into rank 1's scratch, rank 1 puts input chunk 0 into rank 0's
// scratch; both signal, wait and reduce. Each member is one piece of the JSON text, changed by a test.
struct TwoRankPlan {
  std::string collective = "allreduce";
  std::string protocol = "simple";
  std::string world = R"("world_size": 2, "ranks_per_node": 2)";
  std::string bytes = R"("min_message_bytes": 0, "max_message_bytes": 1048576)";
  std::string extra;  // more top-level fields, each followed by ", "
  std::array<std::string, 2> ids{"0", "1"};
  std::array<std::string, 2> chunks{R"("input_chunks": 2, "output_chunks": 2, "scratch_chunks": 1)",
                                    R"("input_chunks": 2, "output_chunks": 2, "scratch_chunks": 1)"};
  std::array<std::string, 2> channels{R"({"id": 0, "type": "memory", "peer": 1})",
                                      R"({"id": 0, "type": "memory", "peer": 0})"};
  std::array<std::string, 2> semaphores{"", ""};
  std::array<std::string, 2> ops{
      R"({"op": "put", "src": {"buffer": "input", "index": 1}, "dsts": [{"channel": 0, "buffer": "scratch", "index": 0}]},
         {"op": "signal", "channels": [0]}, {"op": "wait", "channels": [0]},
         {"op": "reduce", "reduce_op": "sum", "srcs": [{"buffer": "input", "index": 0}, {"buffer": "scratch", "index": 0}],
          "dst": {"buffer": "output", "index": 0}})",
      R"({"op": "put", "src": {"buffer": "input", "index": 0}, "dsts": [{"channel": 0, "buffer": "scratch", "index": 0}]},
         {"op": "signal", "channels": [0]}, {"op": "wait", "channels": [0]},
         {"op": "reduce", "reduce_op": "sum", "srcs": [{"buffer": "input", "index": 1}, {"buffer": "scratch", "index": 0}],
          "dst": {"buffer": "output", "index": 1}})"};
  std::array<std::string, 2> moreThreadblocks{"", ""};  // ", {...}" after thread block 0

  std::string gpu(size_t g) const {
    return R"({"id": )" + ids[g] + ", " + chunks[g] + R"(, "channels": [)" + channels[g] + "]" +
           (semaphores[g].empty() ? "" : R"(, "semaphores": [)" + semaphores[g] + "]") +
           R"(, "threadblocks": [{"id": 0, "ops": [)" + ops[g] + "]}" + moreThreadblocks[g] + "]}";
  }
  std::string json() const {
    return R"({"format_version": 1, "name": "two_rank", "collective": ")" + collective + R"(", "protocol": ")" +
           protocol + R"(", "inplace": false, )" + world + ", " + bytes + R"(, "threads_per_block": 256,
      "alignment_bytes": 16, )" +
           extra + R"("gpus": [)" + gpu(0) + ", " + gpu(1) + "]}";
  }
};

const std::string kOps0 = "gpus[0].threadblocks[0].ops";

void expectValid(const TwoRankPlan& plan) {
  try {
    Plan::parse(plan.json());
  } catch (const PlanError& error) {
    ADD_FAILURE() << "refused: " << error.what();
  }
}

void expectError(const TwoRankPlan& plan, const std::string& path, const std::string& detail) {
  try {
    Plan::parse(plan.json());
    ADD_FAILURE() << "accepted; expected " << path << ": " << detail;
  } catch (const PlanError& error) {
    EXPECT_EQ(error.jsonPath(), path) << error.what();
    EXPECT_EQ(error.detail(), detail);
    EXPECT_EQ(error.origin(), "<memory>");
  }
}

// A plan whose rank 0 runs `ops` in thread block 0 (rank 1 keeps its ops).
TwoRankPlan withOps0(const std::string& ops) {
  TwoRankPlan plan;
  plan.ops[0] = ops;
  return plan;
}

TEST(PlanValidationTest, TheBasePlanIsValid) { expectValid(TwoRankPlan()); }

TEST(PlanValidationTest, OneProgramPerRank) {
  TwoRankPlan plan;
  plan.world = R"("world_size": 4, "ranks_per_node": 2)";
  expectError(plan, "gpus", "has 2 programs but world_size is 4; expected one program per rank");
  plan.world = R"("world_size": 1, "ranks_per_node": 1)";
  expectError(plan, "gpus", "has 2 programs but world_size is 1; expected one program per rank");
}

TEST(PlanValidationTest, RanksPerNodeDividesWorldSize) {
  TwoRankPlan plan;
  plan.world = R"("world_size": 2, "ranks_per_node": 3)";
  expectError(plan, "ranks_per_node", "3 does not divide world_size 2");
  plan.world = R"("world_size": 2, "ranks_per_node": 1)";
  expectValid(plan);
}

TEST(PlanValidationTest, MessageSizeRangeIsOrdered) {
  TwoRankPlan plan;
  plan.bytes = R"("min_message_bytes": 4096, "max_message_bytes": 4095)";
  expectError(plan, "max_message_bytes", "4095 is below min_message_bytes 4096");
  plan.bytes = R"("min_message_bytes": 4096, "max_message_bytes": 4096)";
  expectValid(plan);
}

TEST(PlanValidationTest, BroadcastNamesARootInsideTheWorld) {
  TwoRankPlan plan;
  plan.collective = "broadcast";
  expectError(plan, "root", "missing required field (a broadcast names its root rank)");
  plan.extra = R"("root": 2, )";
  expectError(plan, "root", "rank 2 is outside the world (world_size 2)");
  plan.extra = R"("root": 1, )";
  expectValid(plan);
}

TEST(PlanValidationTest, GpuIdsAreRanksOfTheWorldOnce) {
  TwoRankPlan plan;
  plan.ids = {"0", "2"};
  expectError(plan, "gpus[1].id", "rank 2 is outside the world (world_size 2)");
  plan.ids = {"1", "1"};
  expectError(plan, "gpus[1].id", "rank 1 already has a program at gpus[0]");
}

TEST(PlanValidationTest, EveryRankCutsItsBuffersAlike) {
  TwoRankPlan plan;
  plan.chunks[1] = R"("input_chunks": 4, "output_chunks": 2, "scratch_chunks": 1)";
  expectError(plan, "gpus[1].input_chunks", "4 differs from gpus[0].input_chunks 2; every rank cuts its buffers alike");
  plan.chunks[1] = R"("input_chunks": 2, "output_chunks": 3, "scratch_chunks": 1)";
  expectError(plan, "gpus[1].output_chunks",
              "3 differs from gpus[0].output_chunks 2; every rank cuts its buffers alike");
  plan.chunks[1] = R"("input_chunks": 2, "output_chunks": 2, "scratch_chunks": 5)";  // scratch may differ
  expectValid(plan);
}

TEST(PlanValidationTest, CollectivesFixTheOutputShape) {
  TwoRankPlan plan;
  plan.ops = {R"({"op": "nop"})", R"({"op": "nop"})"};
  auto shape = [&](const char* collective, const char* chunks) {
    plan.collective = collective;
    plan.chunks = {chunks, chunks};
    return plan;
  };
  expectError(shape("allreduce", R"("input_chunks": 2, "output_chunks": 1, "scratch_chunks": 0)"),
              "gpus[0].output_chunks", "an \"allreduce\" plan needs output_chunks = input_chunks = 2, got 1");
  expectError(shape("sendrecv", R"("input_chunks": 2, "output_chunks": 4, "scratch_chunks": 0)"),
              "gpus[0].output_chunks", "a \"sendrecv\" plan needs output_chunks = input_chunks = 2, got 4");
  expectError(shape("allgather", R"("input_chunks": 2, "output_chunks": 2, "scratch_chunks": 0)"),
              "gpus[0].output_chunks",
              "an \"allgather\" plan needs output_chunks = world_size x input_chunks = 4, got 2");
  expectValid(shape("allgather", R"("input_chunks": 2, "output_chunks": 4, "scratch_chunks": 0)"));
  expectError(shape("reducescatter", R"("input_chunks": 3, "output_chunks": 1, "scratch_chunks": 0)"),
              "gpus[0].input_chunks",
              "a \"reducescatter\" plan needs input_chunks = world_size x output_chunks = 2, got 3");
  expectValid(shape("reducescatter", R"("input_chunks": 4, "output_chunks": 2, "scratch_chunks": 0)"));
  expectError(shape("alltoall", R"("input_chunks": 3, "output_chunks": 3, "scratch_chunks": 0)"),
              "gpus[0].input_chunks", "an \"alltoall\" plan needs input_chunks divisible by world_size 2, got 3");
  expectValid(shape("alltoall", R"("input_chunks": 4, "output_chunks": 4, "scratch_chunks": 0)"));
}

TEST(PlanValidationTest, IdsAreUniqueWithinARank) {
  TwoRankPlan plan;
  plan.channels[0] = R"({"id": 0, "type": "memory", "peer": 1}, {"id": 0, "type": "port", "peer": 1})";
  expectError(plan, "gpus[0].channels[1].id", "channel 0 is declared twice (first at index 0)");

  plan = TwoRankPlan();
  plan.semaphores[1] = R"({"id": 3}, {"id": 4}, {"id": 3, "initial_value": 1})";
  expectError(plan, "gpus[1].semaphores[2].id", "semaphore 3 is declared twice (first at index 0)");

  plan = TwoRankPlan();
  plan.moreThreadblocks[0] = R"(, {"id": 1, "ops": []}, {"id": 0, "ops": []})";
  expectError(plan, "gpus[0].threadblocks[2].id", "thread block 0 is declared twice (first at index 0)");
}

TEST(PlanValidationTest, ChannelPeersAreOtherRanksOfTheWorld) {
  TwoRankPlan plan;
  plan.channels[1] = R"({"id": 0, "type": "memory", "peer": 7})";
  expectError(plan, "gpus[1].channels[0].peer", "rank 7 is outside the world (world_size 2)");
  plan.channels[1] = R"({"id": 0, "type": "memory", "peer": 1})";
  expectError(plan, "gpus[1].channels[0].peer", "a channel connects two different ranks, but 1 is this rank itself");
}

TEST(PlanValidationTest, SwitchGroupsHoldThisRankAndRanksOfTheWorld) {
  TwoRankPlan plan;
  plan.channels[0] += R"(, {"id": 1, "type": "switch", "ranks": [0, 5], "buffer": "output"})";
  expectError(plan, "gpus[0].channels[1].ranks[1]", "rank 5 is outside the world (world_size 2)");
  plan.channels[0] =
      R"({"id": 0, "type": "memory", "peer": 1}, {"id": 1, "type": "switch", "ranks": [1, 1], "buffer": "output"})";
  // The decoder refuses a repeated rank before validation sees the group.
  expectError(plan, "gpus[0].channels[1].ranks[1]", "1 is listed twice");
}

TEST(PlanValidationTest, ChannelsPairUpAcrossRanks) {
  TwoRankPlan plan;
  plan.channels[0] += R"(, {"id": 1, "type": "memory", "peer": 1})";
  expectError(plan, "gpus[0].channels[0]",
              "rank 0 declares 2 memory channel(s) to rank 1 but rank 1 declares 1 back; channels pair up in order");
  plan.channels[1] += R"(, {"id": 5, "type": "memory", "peer": 0})";
  expectValid(plan);

  plan = TwoRankPlan();
  plan.channels[1] = R"({"id": 0, "type": "port", "peer": 0})";  // a port channel does not answer a memory one
  expectError(plan, "gpus[0].channels[0]",
              "rank 0 declares 1 memory channel(s) to rank 1 but rank 1 declares 0 back; channels pair up in order");
}

TEST(PlanValidationTest, SwitchChannelsMatchAcrossTheGroup) {
  TwoRankPlan plan;
  plan.channels[0] += R"(, {"id": 1, "type": "switch", "ranks": [0, 1], "buffer": "output"})";
  expectError(plan, "gpus[0].channels[1]",
              "rank 1 of the group declares 0 matching switch channel(s) on the output buffer, but rank 0 declares 1");
  plan.channels[1] += R"(, {"id": 9, "type": "switch", "ranks": [1, 0], "buffer": "output"})";
  expectValid(plan);
  plan.channels[1] =
      R"({"id": 0, "type": "memory", "peer": 0}, {"id": 9, "type": "switch", "ranks": [1, 0], "buffer": "input"})";
  expectError(plan, "gpus[0].channels[1]",
              "rank 1 of the group declares 0 matching switch channel(s) on the output buffer, but rank 0 declares 1");
}

TEST(PlanValidationTest, OpsUseDeclaredChannels) {
  expectError(withOps0(R"({"op": "signal", "channels": [0, 4]})"), kOps0 + "[0].channels[1]",
              "channel 4 is not declared by rank 0");
  expectError(
      withOps0(
          R"({"op": "get", "src": {"channel": 2, "buffer": "input", "index": 0}, "dst": {"buffer": "input", "index": 0}})"),
      kOps0 + "[0].src.channel", "channel 2 is not declared by rank 0");
}

TEST(PlanValidationTest, OpsUseTheirChannelTypes) {
  TwoRankPlan plan;
  plan.channels = {R"({"id": 0, "type": "memory", "peer": 1}, {"id": 1, "type": "port", "peer": 1},
                     {"id": 2, "type": "switch", "ranks": [0, 1], "buffer": "output"})",
                   R"({"id": 0, "type": "memory", "peer": 0}, {"id": 1, "type": "port", "peer": 0},
                     {"id": 2, "type": "switch", "ranks": [0, 1], "buffer": "output"})"};
  auto check = [&](const std::string& op, const std::string& path, const std::string& detail) {
    plan.ops[0] = op;
    if (detail.empty()) {
      expectValid(plan);
    } else {
      expectError(plan, kOps0 + "[0]." + path, detail);
    }
  };
  const std::string input0 = R"({"buffer": "input", "index": 0})";
  check(R"({"op": "get", "src": {"channel": 1, "buffer": "input", "index": 0}, "dst": )" + input0 + "}", "src.channel",
        "channel 1 is a port channel, but \"get\" needs a memory channel here");
  check(R"({"op": "get", "src": {"channel": 0, "buffer": "input", "index": 0}, "dst": )" + input0 + "}", "", "");
  check(R"({"op": "flush", "channels": [1, 0]})", "channels[1]",
        "channel 0 is a memory channel, but \"flush\" needs a port channel here");
  check(R"({"op": "signal", "channels": [0, 1, 2]})", "channels[2]",
        "channel 2 is a switch channel, but \"signal\" needs a memory or port channel here");
  check(R"({"op": "put", "src": )" + input0 + R"(, "dsts": [{"channel": 2, "buffer": "output", "index": 0}]})",
        "dsts[0].channel", "channel 2 is a switch channel, but \"put\" needs a memory or port channel here");
  check(R"({"op": "put_with_signal_and_flush", "src": )" + input0 +
            R"(, "dsts": [{"channel": 0, "buffer": "output", "index": 0}]})",
        "dsts[0].channel",
        "channel 0 is a memory channel, but \"put_with_signal_and_flush\" needs a port channel here");
  check(
      R"({"op": "read_reduce", "reduce_op": "sum", "srcs": [{"channel": 1, "buffer": "input", "index": 0}], "dst": )" +
          input0 + "}",
      "srcs[0].channel", "channel 1 is a port channel, but \"read_reduce\" needs a memory channel here");
  check(
      R"({"op": "multimem_reduce", "reduce_op": "max", "src": {"channel": 0, "buffer": "output", "index": 0}, "dst": )" +
          input0 + "}",
      "src.channel", "channel 0 is a memory channel, but \"multimem_reduce\" needs a switch channel here");
  check(R"({"op": "multimem_broadcast", "src": )" + input0 +
            R"(, "dsts": [{"channel": 2, "buffer": "output", "index": 1}]})",
        "", "");
  check(R"({"op": "multimem_broadcast", "src": )" + input0 +
            R"(, "dsts": [{"channel": 2, "buffer": "input", "index": 1}]})",
        "dsts[0].buffer", "switch channel 2 is bound to the output buffer, got \"input\"");
  check(R"({"op": "multimem_broadcast", "src": )" + input0 +
            R"(, "dsts": [{"channel": 2, "buffer": "output", "index": 2}]})",
        "dsts[0].index", "2 is outside the multicast output buffer (2 chunks)");
  // The fused reduce + broadcast (MSCCL++'s glres): multicast destinations, with or without a local one.
  const std::string switchOutput0 = R"({"channel": 2, "buffer": "output", "index": 0})";
  check(R"({"op": "multimem_reduce", "reduce_op": "sum", "src": )" + switchOutput0 + R"(, "dsts": [)" + switchOutput0 +
            "]}",
        "", "");
  check(R"({"op": "multimem_reduce", "reduce_op": "sum", "src": )" + switchOutput0 + R"(, "dst": )" + input0 +
            R"(, "dsts": [)" + switchOutput0 + "]}",
        "", "");
  check(R"({"op": "multimem_reduce", "reduce_op": "sum", "src": )" + switchOutput0 + "}", "dst",
        "expected a destination: dst (this rank's chunk), dsts (multicast chunks) or both");
  check(R"({"op": "multimem_reduce", "reduce_op": "sum", "src": )" + switchOutput0 +
            R"(, "dsts": [{"channel": 0, "buffer": "output", "index": 0}]})",
        "dsts[0].channel", "channel 0 is a memory channel, but \"multimem_reduce\" needs a switch channel here");
}

TEST(PlanValidationTest, LocalChunksStayInsideTheirBuffer) {
  expectError(
      withOps0(R"({"op": "copy", "src": {"buffer": "scratch", "index": 1}, "dst": {"buffer": "output", "index": 0}})"),
      kOps0 + "[0].src.index", "1 is outside the scratch buffer (1 chunks)");
  expectError(
      withOps0(
          R"({"op": "copy", "src": {"buffer": "input", "index": 0}, "dst": {"buffer": "output", "index": 4294967295}})"),
      kOps0 + "[0].dst.index", "4294967295 is outside the output buffer (2 chunks)");
  // index + count is computed in 64 bits: no wrap-around past UINT32_MAX.
  expectError(withOps0(R"({"op": "copy", "src": {"buffer": "input", "index": 1, "count": 4294967295},
                           "dst": {"buffer": "output", "index": 0, "count": 4294967295}})"),
              kOps0 + "[0].src.count", "chunks 1 to 4294967295 run past the end of the input buffer (2 chunks)");
  expectValid(withOps0(
      R"({"op": "copy", "src": {"buffer": "input", "index": 0, "count": 2}, "dst": {"buffer": "output", "index": 0, "count": 2}})"));
}

TEST(PlanValidationTest, RemoteChunksAreCheckedAgainstThePeersBuffer) {
  TwoRankPlan plan;
  plan.chunks[0] = R"("input_chunks": 2, "output_chunks": 2, "scratch_chunks": 1)";
  plan.chunks[1] = R"("input_chunks": 2, "output_chunks": 2, "scratch_chunks": 4)";
  // Rank 0 has one scratch chunk but may write rank 1's fourth.
  plan.ops[0] =
      R"({"op": "put", "src": {"buffer": "input", "index": 1}, "dsts": [{"channel": 0, "buffer": "scratch", "index": 3}]})";
  expectValid(plan);
  // Rank 1 has four scratch chunks but may not write rank 0's second.
  plan.ops[1] =
      R"({"op": "put", "src": {"buffer": "input", "index": 1}, "dsts": [{"channel": 0, "buffer": "scratch", "index": 1}]})";
  expectError(plan, "gpus[1].threadblocks[0].ops[0].dsts[0].index", "1 is outside rank 0's scratch buffer (1 chunks)");
  plan.ops[1] = R"({"op": "get", "src": {"channel": 0, "buffer": "scratch", "index": 0, "count": 2},
                    "dst": {"buffer": "scratch", "index": 0, "count": 2}})";
  expectError(plan, "gpus[1].threadblocks[0].ops[0].src.count",
              "chunks 0 to 1 run past the end of rank 0's scratch buffer (1 chunks)");
}

TEST(PlanValidationTest, ChunkRangesOfAnOpHaveOneLength) {
  expectError(withOps0(R"({"op": "reduce", "reduce_op": "sum",
      "srcs": [{"buffer": "input", "index": 0, "count": 2}, {"buffer": "output", "index": 0, "count": 2}],
      "dst": {"buffer": "output", "index": 0}})"),
              kOps0 + "[0].dst.count", "1 differs from the op's other chunk ranges (2 chunks)");
  expectError(withOps0(R"({"op": "put", "src": {"buffer": "input", "index": 0},
      "dsts": [{"channel": 0, "buffer": "output", "index": 0}, {"channel": 0, "buffer": "output", "index": 0, "count": 2}]})"),
              kOps0 + "[0].dsts[1].count", "2 differs from the op's other chunk ranges (1 chunks)");
}

TEST(PlanValidationTest, PacketOpsNeedTheLLProtocol) {
  const std::string putPacket =
      R"({"op": "put_packet", "src": {"buffer": "input", "index": 0}, "dsts": [{"channel": 0, "buffer": "scratch", "index": 0}]})";
  TwoRankPlan plan = withOps0(R"({"op": "nop"}, )" + putPacket);
  expectError(plan, kOps0 + "[1].op",
              "\"put_packet\" needs the \"ll\" protocol, but this plan's protocol is \"simple\"");
  plan.protocol = "ll";  // and ll plans may use non-packet ops: rank 1 keeps its put/signal/wait/reduce
  expectValid(plan);
}

TEST(PlanValidationTest, BarriersNameExistingThreadBlocksIncludingTheirOwn) {
  TwoRankPlan plan;
  plan.ops[0] = R"({"op": "barrier", "barrier_id": 0, "threadblocks": [0, 1]})";
  plan.moreThreadblocks[0] = R"(, {"id": 1, "ops": [{"op": "barrier", "barrier_id": 0, "threadblocks": [1, 0]}]})";
  expectValid(plan);
  plan.ops[0] = R"({"op": "barrier", "barrier_id": 0, "threadblocks": [0, 2]})";
  expectError(plan, kOps0 + "[0].threadblocks[1]", "thread block 2 does not exist on rank 0");
  plan.ops[0] = R"({"op": "barrier", "barrier_id": 0, "threadblocks": [1]})";
  expectError(plan, kOps0 + "[0].threadblocks",
              "does not include this thread block (0); a thread block only waits at barriers it takes part in");
}

TEST(PlanValidationTest, SemaphoreOpsNameDeclaredSemaphores) {
  TwoRankPlan plan =
      withOps0(R"({"op": "sem_release", "semaphores": [2]}, {"op": "sem_acquire", "semaphores": [2, 3]})");
  plan.semaphores[0] = R"({"id": 2, "initial_value": 0})";
  expectError(plan, kOps0 + "[1].semaphores[1]", "semaphore 3 is not declared by rank 0");
  plan.semaphores[0] += R"(, {"id": 3})";
  expectValid(plan);
  plan.semaphores[0] = "";
  expectError(plan, kOps0 + "[0].semaphores[0]", "semaphore 2 is not declared by rank 0");
}

TEST(PlanValidationTest, PipelineBodiesAreChecked) {
  expectError(withOps0(R"({"op": "pipeline", "iterations": 2, "body": [
      {"op": "nop"}, {"op": "copy", "src": {"buffer": "input", "index": 2}, "dst": {"buffer": "output", "index": 0}}]})"),
              kOps0 + "[0].body[1].src.index", "2 is outside the input buffer (2 chunks)");
  expectError(withOps0(R"({"op": "pipeline", "iterations": 2, "body": [{"op": "wait", "channels": [3]}]})"),
              kOps0 + "[0].body[0].channels[0]", "channel 3 is not declared by rank 0");
}

TEST(PlanValidationTest, ErrorsNameTheRankWhereTheyAre) {
  TwoRankPlan plan;
  plan.ids = {"1", "0"};  // gpus[0] is rank 1 now: paths follow list positions, messages name ranks
  plan.channels = {R"({"id": 0, "type": "memory", "peer": 0})", R"({"id": 0, "type": "memory", "peer": 1})"};
  plan.ops[1] = R"({"op": "wait", "channels": [1]})";
  expectError(plan, "gpus[1].threadblocks[0].ops[0].channels[0]", "channel 1 is not declared by rank 0");
}

}  // namespace
}  // namespace loom
