// The typed model the decoder builds: every field of the example plans and of the kitchen-sink plan
// lands in the right struct member, enum and value; defaults; summaries; numbers and their limits.

#include <gtest/gtest.h>

#include <filesystem>
#include <ostream>
#include <set>
#include <string>

#include "loom/error.hpp"
#include "loom/plan.hpp"

namespace loom {

// Enum names in assertion failures instead of raw bytes (found by argument-dependent lookup).
inline void PrintTo(BufferType value, std::ostream* out) { *out << bufferName(value); }
inline void PrintTo(ChannelType value, std::ostream* out) { *out << channelTypeName(value); }
inline void PrintTo(Collective value, std::ostream* out) { *out << collectiveName(value); }
inline void PrintTo(OpType value, std::ostream* out) { *out << opTypeName(value); }
inline void PrintTo(Protocol value, std::ostream* out) { *out << protocolName(value); }
inline void PrintTo(ReduceOp value, std::ostream* out) { *out << reduceOpName(value); }

namespace {

namespace fs = std::filesystem;

std::string planPath(const std::string& relative) { return (fs::path(LOOM_SOURCE_DIR) / relative).string(); }

Plan loadExample(const std::string& name) { return Plan::load(planPath("examples/plans/" + name)); }

// A valid two-rank all-reduce with one nop per rank. `fields` is spliced in after "name" (a
// "collective" there replaces the default), `ops0` replaces rank 0's ops, `chunks` sets both ranks'
// buffer sizes, and `reversed` lists rank 1's program first.
std::string smallPlan(const std::string& fields = "", const std::string& ops0 = R"({"op": "nop"})",
                      const std::string& chunks = R"("input_chunks": 2, "output_chunks": 2, "scratch_chunks": 2)",
                      bool reversed = false) {
  const std::string gpu0 = R"({"id": 0, )" + chunks + R"(, "channels": [{"id": 0, "type": "memory", "peer": 1}],
      "threadblocks": [{"id": 0, "ops": [)" +
                           ops0 + R"(]}]})";
  const std::string gpu1 = R"({"id": 1, )" + chunks + R"(, "channels": [{"id": 0, "type": "memory", "peer": 0}],
      "threadblocks": [{"id": 0, "ops": [{"op": "nop"}]}]})";
  std::string collective = fields.find("\"collective\"") == std::string::npos ? R"("collective": "allreduce", )" : "";
  return R"({"format_version": 1, "name": "small", )" + fields + collective + R"("protocol": "simple",
    "inplace": false, "world_size": 2, "ranks_per_node": 2, "threads_per_block": 256, "min_message_bytes": 0,
    "max_message_bytes": 1048576, "alignment_bytes": 16,
    "gpus": [)" +
         (reversed ? gpu1 + ", " + gpu0 : gpu0 + ", " + gpu1) + "]}";
}

void expectChunk(const ChunkRef& ref, BufferType buffer, uint32_t index, uint32_t count, uint32_t channel) {
  EXPECT_EQ(ref.buffer, buffer);
  EXPECT_EQ(ref.index, index);
  EXPECT_EQ(ref.count, count);
  EXPECT_EQ(ref.channel, channel);
  EXPECT_EQ(ref.isRemote(), channel != kLocalChunk);
}

void expectPlanError(const std::string& json, const std::string& path, const std::string& detail) {
  try {
    Plan::parse(json);
    ADD_FAILURE() << "accepted; expected an error at " << path;
  } catch (const PlanError& error) {
    EXPECT_EQ(error.jsonPath(), path) << error.what();
    EXPECT_EQ(error.detail(), detail);
  }
}

TEST(PlanDecoderTest, SimpleExampleDecodesEveryField) {
  const Plan plan = loadExample("allreduce_2r_simple.json");
  EXPECT_EQ(plan.name, "allreduce_2r_simple");
  EXPECT_EQ(plan.collective, Collective::kAllReduce);
  EXPECT_EQ(plan.protocol, Protocol::kSimple);
  EXPECT_FALSE(plan.inplace);
  EXPECT_EQ(plan.worldSize, 2u);
  EXPECT_EQ(plan.ranksPerNode, 2u);
  EXPECT_EQ(plan.threadsPerBlock, 512u);
  EXPECT_EQ(plan.minMessageBytes, 1024u);
  EXPECT_EQ(plan.maxMessageBytes, 1073741824u);
  EXPECT_EQ(plan.alignmentBytes, 16u);
  EXPECT_FALSE(plan.reuseScratch);
  EXPECT_FALSE(plan.root.has_value());
  EXPECT_EQ(plan.metadata.description.rfind("Reduce-scatter then all-gather over one memory channel", 0), 0u);
  EXPECT_EQ(plan.metadata.compilerVersion, "");
  ASSERT_EQ(plan.gpus.size(), 2u);

  const GpuProgram& gpu = plan.gpus[1];
  EXPECT_EQ(gpu.rank, 1u);
  EXPECT_EQ(gpu.inputChunks, 2u);
  EXPECT_EQ(gpu.outputChunks, 2u);
  EXPECT_EQ(gpu.scratchChunks, 1u);
  EXPECT_EQ(gpu.chunks(BufferType::kScratch), 1u);
  ASSERT_EQ(gpu.channels.size(), 1u);
  EXPECT_EQ(gpu.channels[0].id, 0u);
  EXPECT_EQ(gpu.channels[0].type, ChannelType::kMemory);
  EXPECT_EQ(gpu.channels[0].peer, 0u);
  EXPECT_TRUE(gpu.semaphores.empty());
  ASSERT_EQ(gpu.threadblocks.size(), 1u);
  EXPECT_EQ(gpu.threadblocks[0].id, 0u);

  const std::vector<Op>& ops = gpu.threadblocks[0].ops;
  ASSERT_EQ(ops.size(), 8u);
  const OpType expected[] = {OpType::kPut, OpType::kSignal, OpType::kWait, OpType::kReduce,
                             OpType::kNop, OpType::kPut,    OpType::kSignal, OpType::kWait};
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(ops[i].type, expected[i]) << "op " << i;

  ASSERT_TRUE(ops[0].src);
  expectChunk(*ops[0].src, BufferType::kInput, 0, 1, kLocalChunk);
  EXPECT_FALSE(ops[0].dst);
  ASSERT_EQ(ops[0].dsts.size(), 1u);
  expectChunk(ops[0].dsts[0], BufferType::kScratch, 0, 1, 0);
  EXPECT_FALSE(ops[0].reduceOp);

  EXPECT_EQ(ops[1].channels, std::vector<uint32_t>{0});
  EXPECT_FALSE(ops[2].relaxed);

  const Op& reduce = ops[3];
  EXPECT_EQ(reduce.reduceOp, ReduceOp::kSum);
  ASSERT_EQ(reduce.srcs.size(), 2u);
  expectChunk(reduce.srcs[0], BufferType::kInput, 1, 1, kLocalChunk);
  expectChunk(reduce.srcs[1], BufferType::kScratch, 0, 1, kLocalChunk);
  ASSERT_TRUE(reduce.dst);
  expectChunk(*reduce.dst, BufferType::kOutput, 1, 1, kLocalChunk);
  EXPECT_FALSE(reduce.location);
  EXPECT_TRUE(reduce.dsts.empty());
  EXPECT_TRUE(reduce.body.empty());
}

TEST(PlanDecoderTest, LLExampleDecodesPacketOps) {
  const Plan plan = loadExample("allreduce_2r_ll.json");
  EXPECT_EQ(plan.protocol, Protocol::kLL);
  EXPECT_EQ(plan.threadsPerBlock, 256u);
  EXPECT_EQ(plan.maxMessageBytes, 65536u);
  const std::vector<Op>& ops = plan.gpu(0).threadblocks[0].ops;
  ASSERT_EQ(ops.size(), 2u);

  EXPECT_EQ(ops[0].type, OpType::kPutPacket);
  expectChunk(*ops[0].src, BufferType::kInput, 0, 1, kLocalChunk);
  ASSERT_EQ(ops[0].dsts.size(), 1u);
  expectChunk(ops[0].dsts[0], BufferType::kScratch, 0, 1, 0);

  EXPECT_EQ(ops[1].type, OpType::kReducePacket);
  EXPECT_EQ(ops[1].reduceOp, ReduceOp::kSum);
  expectChunk(*ops[1].src, BufferType::kInput, 0, 1, kLocalChunk);
  ASSERT_EQ(ops[1].srcs.size(), 1u);
  expectChunk(ops[1].srcs[0], BufferType::kScratch, 0, 1, kLocalChunk);
  expectChunk(*ops[1].dst, BufferType::kOutput, 0, 1, kLocalChunk);
  EXPECT_FALSE(ops[1].packetDst);
}

TEST(PlanDecoderTest, AllGatherExampleDecodesEveryRank) {
  const Plan plan = loadExample("allgather_4r_simple.json");
  EXPECT_EQ(plan.collective, Collective::kAllGather);
  EXPECT_EQ(plan.worldSize, 4u);
  EXPECT_EQ(plan.threadsPerBlock, 1024u);
  for (uint32_t rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const GpuProgram& gpu = plan.gpu(rank);
    EXPECT_EQ(gpu.inputChunks, 1u);
    EXPECT_EQ(gpu.outputChunks, 4u);
    EXPECT_EQ(gpu.scratchChunks, 0u);
    ASSERT_EQ(gpu.channels.size(), 3u);
    std::vector<uint32_t> peers;
    for (const Channel& c : gpu.channels) peers.push_back(c.peer);
    std::vector<uint32_t> expectedPeers;
    for (uint32_t peer = 0; peer < 4; ++peer) {
      if (peer != rank) expectedPeers.push_back(peer);
    }
    EXPECT_EQ(peers, expectedPeers);

    const std::vector<Op>& ops = gpu.threadblocks.at(0).ops;
    ASSERT_EQ(ops.size(), 6u);
    EXPECT_EQ(ops[0].type, OpType::kSignal);  // the handshake: peers finished the previous call
    EXPECT_TRUE(ops[0].relaxed);
    EXPECT_EQ(ops[1].type, OpType::kWait);
    EXPECT_TRUE(ops[1].relaxed);
    EXPECT_EQ(ops[2].type, OpType::kCopy);
    expectChunk(*ops[2].dst, BufferType::kOutput, rank, 1, kLocalChunk);
    EXPECT_EQ(ops[3].type, OpType::kPut);
    ASSERT_EQ(ops[3].dsts.size(), 3u);
    for (uint32_t i = 0; i < 3; ++i) expectChunk(ops[3].dsts[i], BufferType::kOutput, rank, 1, i);
    EXPECT_EQ(ops[4].type, OpType::kSignal);
    EXPECT_EQ(ops[4].channels, (std::vector<uint32_t>{0, 1, 2}));
    EXPECT_EQ(ops[5].type, OpType::kWait);
    EXPECT_EQ(ops[5].channels, (std::vector<uint32_t>{0, 1, 2}));
  }
}

class KitchenSinkTest : public testing::Test {
 protected:
  static const Plan& plan() {
    static const Plan plan = Plan::load(planPath("tests/data/plans/good/kitchen_sink_ll.json"));
    return plan;
  }
  // Rank 0's ops: thread block 0 holds the data, sync, control and switch ops; thread block 1 the packet ops.
  static const Op& op(uint32_t tb, size_t index) { return plan().gpu(0).threadblocks.at(tb).ops.at(index); }
};

TEST_F(KitchenSinkTest, UsesEveryOpOfTheVocabulary) {
  const PlanSummary summary = summarize(plan());
  for (size_t i = 0; i < kOpTypeCount; ++i) {
    EXPECT_GT(summary.opsByType[i], 0u) << opTypeName(static_cast<OpType>(i)) << " is missing from the kitchen sink";
  }
}

TEST_F(KitchenSinkTest, SummaryCountsPipelineBodies) {
  const PlanSummary summary = summarize(plan());
  // Per rank: copy and put once at top level and once in the pipeline body; barrier in both tbs.
  for (size_t i = 0; i < kOpTypeCount; ++i) {
    const OpType type = static_cast<OpType>(i);
    const uint64_t perRank = (type == OpType::kCopy || type == OpType::kPut || type == OpType::kBarrier) ? 2 : 1;
    EXPECT_EQ(summary.opsByType[i], 2 * perRank) << opTypeName(type);
  }
  EXPECT_EQ(summary.threadblocks, 4u);
  EXPECT_EQ(summary.maxThreadblocksPerRank, 2u);
  EXPECT_EQ(summary.maxScratchChunks, 8u);
  EXPECT_EQ(summary.channels, 6u);
}

TEST_F(KitchenSinkTest, TopLevelAndMetadata) {
  EXPECT_EQ(plan().name, "kitchen_sink_ll");
  EXPECT_EQ(plan().protocol, Protocol::kLL);
  EXPECT_TRUE(plan().reuseScratch);
  EXPECT_EQ(plan().threadsPerBlock, 768u);
  EXPECT_EQ(plan().minMessageBytes, 4096u);
  EXPECT_EQ(plan().maxMessageBytes, 1048576u);
  EXPECT_EQ(plan().alignmentBytes, 64u);
  EXPECT_EQ(plan().metadata.compilerVersion, "0.1.0");
  EXPECT_EQ(plan().metadata.sourceHash, "sha256:0123456789abcdef");
  EXPECT_EQ(plan().metadata.description.rfind("Every op of the plan vocabulary at least once", 0), 0u);
}

TEST_F(KitchenSinkTest, ChannelsAndSemaphores) {
  const GpuProgram& gpu = plan().gpu(1);
  ASSERT_EQ(gpu.channels.size(), 3u);
  EXPECT_EQ(gpu.channels[0].type, ChannelType::kMemory);
  EXPECT_EQ(gpu.channels[0].peer, 0u);
  EXPECT_EQ(gpu.channels[1].type, ChannelType::kPort);
  EXPECT_EQ(gpu.channels[1].peer, 0u);
  EXPECT_EQ(gpu.channels[2].id, 2u);
  EXPECT_EQ(gpu.channels[2].type, ChannelType::kSwitch);
  EXPECT_EQ(gpu.channels[2].ranks, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(gpu.channels[2].buffer, BufferType::kOutput);
  ASSERT_EQ(gpu.semaphores.size(), 2u);
  EXPECT_EQ(gpu.semaphores[0].id, 0u);
  EXPECT_EQ(gpu.semaphores[0].initialValue, 0u);
  EXPECT_EQ(gpu.semaphores[1].id, 1u);
  EXPECT_EQ(gpu.semaphores[1].initialValue, 3u);
}

TEST_F(KitchenSinkTest, DataOps) {
  ASSERT_TRUE(op(0, 0).location);
  EXPECT_EQ(op(0, 0).location->file, "kitchen_sink.py");
  EXPECT_EQ(op(0, 0).location->line, 12u);
  EXPECT_FALSE(op(0, 1).location);

  ASSERT_EQ(op(0, 1).dsts.size(), 2u);  // put to a memory and a port channel
  expectChunk(op(0, 1).dsts[1], BufferType::kScratch, 1, 1, 1);
  EXPECT_TRUE(op(0, 3).relaxed);  // wait
  EXPECT_EQ(op(0, 3).dataSync, DataSync::kAfter);
  EXPECT_EQ(op(0, 11).dataSync, DataSync::kBoth);  // the default
  EXPECT_EQ(op(0, 4).type, OpType::kGet);
  expectChunk(*op(0, 4).src, BufferType::kInput, 2, 1, 0);
  expectChunk(*op(0, 4).dst, BufferType::kScratch, 2, 1, kLocalChunk);
  EXPECT_EQ(op(0, 5).reduceOp, ReduceOp::kMax);
  EXPECT_EQ(op(0, 6).reduceOp, ReduceOp::kMin);  // read_reduce: one local and one remote source
  expectChunk(op(0, 6).srcs[0], BufferType::kInput, 1, 1, kLocalChunk);
  expectChunk(op(0, 6).srcs[1], BufferType::kInput, 1, 1, 0);
  EXPECT_EQ(op(0, 7).type, OpType::kReduceSend);
  ASSERT_TRUE(op(0, 7).dst);
  EXPECT_EQ(op(0, 8).type, OpType::kReadReduceSend);
  EXPECT_FALSE(op(0, 8).dst);  // optional for the *_send reductions
  EXPECT_EQ(op(0, 10).type, OpType::kPutWithSignalAndFlush);
  expectChunk(op(0, 10).dsts[0], BufferType::kOutput, 1, 1, 1);
  EXPECT_EQ(op(0, 11).channels, std::vector<uint32_t>{1});  // flush
}

TEST_F(KitchenSinkTest, SyncAndControlOps) {
  EXPECT_EQ(op(0, 12).type, OpType::kBarrier);
  EXPECT_EQ(op(0, 12).barrierId, 0u);
  EXPECT_EQ(op(0, 12).threadblocks, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(op(0, 13).type, OpType::kSemRelease);
  EXPECT_EQ(op(0, 13).semaphores, std::vector<uint32_t>{0});
  EXPECT_EQ(op(0, 13).dataSync, DataSync::kBefore);
  EXPECT_EQ(op(1, 1).type, OpType::kSemAcquire);
  EXPECT_EQ(op(1, 1).semaphores, std::vector<uint32_t>{0});
  EXPECT_EQ(op(0, 14).type, OpType::kNop);

  const Op& pipeline = op(0, 15);
  EXPECT_EQ(pipeline.type, OpType::kPipeline);
  EXPECT_EQ(pipeline.iterations, 4u);
  ASSERT_EQ(pipeline.body.size(), 2u);
  EXPECT_EQ(pipeline.body[0].type, OpType::kCopy);
  expectChunk(*pipeline.body[0].src, BufferType::kInput, 0, 2, kLocalChunk);
  expectChunk(*pipeline.body[0].dst, BufferType::kOutput, 0, 2, kLocalChunk);
  EXPECT_EQ(pipeline.body[1].type, OpType::kPut);
  expectChunk(pipeline.body[1].dsts[0], BufferType::kOutput, 2, 2, 0);
  EXPECT_FALSE(pipeline.src);
  EXPECT_EQ(op(0, 0).iterations, 1u);  // the default outside pipelines
}

TEST_F(KitchenSinkTest, SwitchOps) {
  const Op& reduce = op(0, 16);
  EXPECT_EQ(reduce.type, OpType::kMultimemReduce);
  EXPECT_EQ(reduce.reduceOp, ReduceOp::kSum);
  expectChunk(*reduce.src, BufferType::kOutput, 0, 4, 2);
  expectChunk(*reduce.dst, BufferType::kOutput, 0, 4, kLocalChunk);
  const Op& broadcast = op(0, 17);
  EXPECT_EQ(broadcast.type, OpType::kMultimemBroadcast);
  expectChunk(broadcast.dsts.at(0), BufferType::kOutput, 0, 4, 2);
}

TEST_F(KitchenSinkTest, PacketOps) {
  EXPECT_EQ(op(1, 3).type, OpType::kReadPutPacket);
  expectChunk(*op(1, 3).src, BufferType::kScratch, 4, 1, kLocalChunk);
  ASSERT_EQ(op(1, 3).dsts.size(), 2u);
  expectChunk(op(1, 3).dsts[1], BufferType::kScratch, 6, 1, 1);
  EXPECT_EQ(op(1, 4).type, OpType::kCopyPacket);
  expectChunk(*op(1, 4).dst, BufferType::kScratch, 7, 1, kLocalChunk);
  EXPECT_EQ(op(1, 5).type, OpType::kUnpackPacket);
  expectChunk(*op(1, 5).src, BufferType::kScratch, 7, 1, kLocalChunk);

  const Op& copySend = op(1, 9);
  EXPECT_EQ(copySend.type, OpType::kReduceCopySendPacket);
  expectChunk(*copySend.src, BufferType::kInput, 3, 1, kLocalChunk);
  expectChunk(copySend.srcs.at(0), BufferType::kScratch, 6, 1, kLocalChunk);
  expectChunk(*copySend.dst, BufferType::kOutput, 3, 1, kLocalChunk);
  ASSERT_TRUE(copySend.packetDst);
  expectChunk(*copySend.packetDst, BufferType::kScratch, 3, 1, kLocalChunk);
  expectChunk(copySend.dsts.at(0), BufferType::kScratch, 3, 1, 0);
  EXPECT_EQ(op(1, 8).type, OpType::kReduceCopyPacket);
  EXPECT_TRUE(op(1, 8).dsts.empty());
}

TEST(PlanDecoderTest, EveryEnumHasADistinctName) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kOpTypeCount; ++i) names.insert(opTypeName(static_cast<OpType>(i)));
  EXPECT_EQ(names.size(), kOpTypeCount);
  EXPECT_EQ(opTypeName(OpType::kReduceCopySendPacket), "reduce_copy_send_packet");
  EXPECT_EQ(opTypeName(OpType::kPutWithSignalAndFlush), "put_with_signal_and_flush");
  EXPECT_EQ(collectiveName(Collective::kReduceScatter), "reducescatter");
  EXPECT_EQ(protocolName(Protocol::kLL), "ll");
  EXPECT_EQ(bufferName(BufferType::kScratch), "scratch");
  EXPECT_EQ(channelTypeName(ChannelType::kSwitch), "switch");
  EXPECT_EQ(reduceOpName(ReduceOp::kMax), "max");
}

TEST(PlanDecoderTest, EveryCollectiveDecodes) {
  struct Case {
    const char* name;
    Collective collective;
    const char* extra;
    const char* chunks;
  };
  const Case cases[] = {
      {"allreduce", Collective::kAllReduce, "", R"("input_chunks": 2, "output_chunks": 2)"},
      {"allgather", Collective::kAllGather, "", R"("input_chunks": 1, "output_chunks": 2)"},
      {"reducescatter", Collective::kReduceScatter, "", R"("input_chunks": 2, "output_chunks": 1)"},
      {"alltoall", Collective::kAllToAll, "", R"("input_chunks": 2, "output_chunks": 2)"},
      {"broadcast", Collective::kBroadcast, R"("root": 1, )", R"("input_chunks": 2, "output_chunks": 2)"},
      {"sendrecv", Collective::kSendRecv, "", R"("input_chunks": 2, "output_chunks": 2)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string fields = std::string(R"("collective": ")") + c.name + "\", " + c.extra;
    const Plan plan =
        Plan::parse(smallPlan(fields, R"({"op": "nop"})", std::string(c.chunks) + R"(, "scratch_chunks": 0)"));
    EXPECT_EQ(plan.collective, c.collective);
    EXPECT_EQ(plan.root.has_value(), c.collective == Collective::kBroadcast);
  }
  EXPECT_EQ(Plan::parse(smallPlan(R"("collective": "broadcast", "root": 1, )")).root, 1u);
}

TEST(PlanDecoderTest, CountDefaultsToOneAndCanBeGiven) {
  const Plan plan = Plan::parse(
      smallPlan("", R"({"op": "copy", "src": {"buffer": "input", "index": 0}, "dst": {"buffer": "output", "index": 1}},
             {"op": "copy", "src": {"buffer": "input", "index": 0, "count": 2}, "dst": {"buffer": "output", "index": 0, "count": 2}})"));
  const std::vector<Op>& ops = plan.gpu(0).threadblocks[0].ops;
  expectChunk(*ops[0].src, BufferType::kInput, 0, 1, kLocalChunk);
  expectChunk(*ops[0].dst, BufferType::kOutput, 1, 1, kLocalChunk);
  expectChunk(*ops[1].src, BufferType::kInput, 0, 2, kLocalChunk);
  expectChunk(*ops[1].dst, BufferType::kOutput, 0, 2, kLocalChunk);
}

TEST(PlanDecoderTest, ReadReduceSourcesAreLocalOrRemote) {
  const Plan plan = Plan::parse(smallPlan("", R"({"op": "read_reduce", "reduce_op": "sum",
      "srcs": [{"channel": 0, "buffer": "scratch", "index": 1}, {"buffer": "input", "index": 1}],
      "dst": {"buffer": "output", "index": 0}})"));
  const Op& op = plan.gpu(0).threadblocks[0].ops[0];
  expectChunk(op.srcs[0], BufferType::kScratch, 1, 1, 0);
  expectChunk(op.srcs[1], BufferType::kInput, 1, 1, kLocalChunk);
}

TEST(PlanDecoderTest, ASendTakesOneSourceForAllDestinationsOrOnePerDestination) {
  const std::string in0 = R"({"buffer": "input", "index": 0})", in1 = R"({"buffer": "input", "index": 1})";
  const std::string dsts = R"("dsts": [{"channel": 0, "buffer": "output", "index": 0},
      {"channel": 0, "buffer": "output", "index": 1}])";
  const Plan plan = Plan::parse(smallPlan("", R"({"op": "put", "srcs": [)" + in0 + ", " + in1 + "], " + dsts + "}"));
  const Op& op = plan.gpu(0).threadblocks[0].ops[0];
  EXPECT_FALSE(op.src.has_value());
  ASSERT_EQ(op.srcs.size(), 2u);
  expectChunk(op.srcs[1], BufferType::kInput, 1, 1, kLocalChunk);
  const std::string at = "gpus[0].threadblocks[0].ops[0]";
  expectPlanError(smallPlan("", R"({"op": "put", "src": )" + in0 + R"(, "srcs": [)" + in0 + ", " + in1 + "], " +
                                    dsts + "}"),
                  at + ".srcs",
                  "expected either src (one source for every destination) or srcs (one per destination), got both");
  expectPlanError(smallPlan("", R"({"op": "put", )" + dsts + "}"), at + ".src",
                  "expected either src (one source for every destination) or srcs (one per destination), got neither");
  expectPlanError(smallPlan("", R"({"op": "put", "srcs": [)" + in0 + "], " + dsts + "}"), at + ".srcs",
                  "expected one source per destination (2), got 1");
  expectPlanError(smallPlan("", R"({"op": "put_with_signal", "srcs": [)" + in0 + ", " + in1 + "], " + dsts + "}"),
                  at + ".srcs", "not a field of a \"put_with_signal\" op (its fields: op, loc, src, dsts)");
}

TEST(PlanDecoderTest, APipelineIsSizedByIterationsOrByUnitBytesNeverBoth) {
  const std::string body = R"("body": [{"op": "copy", "src": {"buffer": "input", "index": 0},
      "dst": {"buffer": "output", "index": 0}}]})";
  const Plan plan = Plan::parse(smallPlan("", R"({"op": "pipeline", "unit_bytes": 1048576, )" + body));
  const Op& pipeline = plan.gpu(0).threadblocks[0].ops[0];
  EXPECT_EQ(pipeline.unitBytes, 1048576u);
  EXPECT_EQ(pipeline.body.size(), 1u);
  const std::string at = "gpus[0].threadblocks[0].ops[0]";
  expectPlanError(smallPlan("", R"({"op": "pipeline", "unit_bytes": 64, "iterations": 2, )" + body),
                  at + ".unit_bytes", "expected either iterations or unit_bytes in a pipeline, got both");
  expectPlanError(smallPlan("", R"({"op": "pipeline", "unit_bytes": 100, )" + body), at + ".unit_bytes",
                  "expected a multiple of 16 bytes, got 100");
  expectPlanError(smallPlan("", R"({"op": "pipeline", )" + body), at + ".iterations",
                  "missing required field (expected the number of iterations (or unit_bytes))");
}

TEST(PlanDecoderTest, RankLookupFollowsIdsNotListOrder) {
  const Plan plan = Plan::parse(smallPlan("", R"({"op": "nop"}, {"op": "nop"})",
                                          R"("input_chunks": 2, "output_chunks": 2, "scratch_chunks": 2)", true));
  EXPECT_EQ(plan.gpus[0].rank, 1u);
  EXPECT_EQ(plan.gpu(0).threadblocks[0].ops.size(), 2u);
  EXPECT_EQ(plan.gpu(1).threadblocks[0].ops.size(), 1u);
  EXPECT_EQ(&plan.gpu(1), &plan.gpus[0]);
  try {
    plan.gpu(2);
    FAIL() << "gpu(2) of a two-rank plan returned";
  } catch (const PlanError&) {
    FAIL() << "a bad rank argument is not a bad plan";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
    EXPECT_STREQ(error.what(), "rank: plan 'small' has no program for rank 2 (world_size 2)");
  }
}

TEST(PlanDecoderTest, MetadataKeepsKnownKeysAndAllowsOthers) {
  const Plan plan = Plan::parse(smallPlan(
      R"("metadata": {"compiler_version": "9.9", "source_hash": "abc", "description": "d", "parameters": {"n": [1]},
          "author": {"any": "thing"}}, )"));
  EXPECT_EQ(plan.metadata.compilerVersion, "9.9");
  EXPECT_EQ(plan.metadata.sourceHash, "abc");
  EXPECT_EQ(plan.metadata.description, "d");
  expectPlanError(smallPlan(R"("metadata": {"compiler_version": 2}, )"), "metadata.compiler_version",
                  "expected a string, got 2");
  expectPlanError(smallPlan(R"("metadata": {"parameters": []}, )"), "metadata.parameters",
                  "expected an object, got an array");
}

TEST(PlanDecoderTest, IntegralDoublesCountAsIntegersAsInJsonSchema) {
  EXPECT_EQ(Plan::parse(smallPlan(R"("root": 1.0, )")).root, 1u);
  expectPlanError(smallPlan(R"("root": 1.5, )"), "root",
                  "expected an integer from 0 to 4294967295, got the number 1.5");
  expectPlanError(smallPlan(R"("root": 1e-7, )"), "root",
                  "expected an integer from 0 to 4294967295, got the number 1e-07");
}

TEST(PlanDecoderTest, UnreadableNumbersAreReportedAtTheirPath) {
  expectPlanError(smallPlan(R"("root": 18446744073709551616, )"), "root",
                  "the number 18446744073709551616 cannot be read: integers must fit in 64 bits, other numbers in a "
                  "double");
  expectPlanError(smallPlan(R"("metadata": {"parameters": {"sizes": [1, [2, -1e999]]}}, )"),
                  "metadata.parameters.sizes[1][1]",
                  "the number -1e999 cannot be read: integers must fit in 64 bits, other numbers in a double");
  // A malformed number is a syntax error: no path, whatever unreadable numbers follow it.
  expectPlanError(smallPlan(R"("root": 01, "metadata": {"x": 1e999}, )"), "$",
                  "invalid JSON: Problem while parsing a number");
  std::string deep = std::string(1000, '[') + "1e999" + std::string(1000, ']');
  std::string deepPath;
  for (int i = 0; i < 1000; ++i) deepPath += "[0]";
  expectPlanError(deep, deepPath,
                  "the number 1e999 cannot be read: integers must fit in 64 bits, other numbers in a double");
}

TEST(PlanDecoderTest, LargestAllowedValuesDecode) {
  std::string text = smallPlan();
  const std::string from = R"("max_message_bytes": 1048576)";
  text.replace(text.find(from), from.size(), R"("max_message_bytes": 9007199254740991)");
  EXPECT_EQ(Plan::parse(text).maxMessageBytes, 9007199254740991u);
  text.replace(text.find("9007199254740991"), 16, "9007199254740992");
  expectPlanError(text, "max_message_bytes", "expected an integer from 0 to 9007199254740991, got 9007199254740992");
}

TEST(PlanDecoderTest, ErrorsNameTheirOrigin) {
  try {
    Plan::parse("{}", "from-test");
    FAIL();
  } catch (const PlanError& error) {
    EXPECT_EQ(error.origin(), "from-test");
    EXPECT_EQ(error.jsonPath(), "format_version");
    EXPECT_STREQ(error.what(), "from-test: format_version: missing required field (expected the format version, 1)");
  }
}

}  // namespace
}  // namespace loom
