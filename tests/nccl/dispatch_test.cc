// The library's decisions without a GPU: for a table of NCCL calls, who runs each one (a Loom plan
// from the bundled set, a local copy, nothing, or the real NCCL) and why; the strict environment
// variables; the ncclUniqueId format.

#include "dispatch.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "loom/error.hpp"
#include "loom/plan_registry.hpp"
#include "settings.hpp"
#include "unique_id_format.hpp"

namespace loom::nccl {
namespace {

PlanRegistry& bundled() {
  static PlanRegistry* registry = [] {
    auto* r = new PlanRegistry();
    auto skipped = r->loadDirectory(std::string(LOOM_SOURCE_DIR) + "/plans/default", PlanSource::kBundled);
    EXPECT_TRUE(skipped.empty());
    return r;
  }();
  return *registry;
}

CallInfo call(Call kind, uint64_t count, uint32_t world = 8, ncclDataType_t type = ncclFloat32,
              ncclRedOp_t op = ncclSum) {
  CallInfo info;
  info.call = kind;
  info.count = count;
  info.dataType = type;
  info.op = op;
  info.worldSize = world;
  info.ranksPerNode = world;
  return info;
}

struct Row {
  const char* what;
  CallInfo info;
  Route route;
  Reason reason;
  const char* planPrefix = "";  // for kLoom: the chosen plan's name starts with it
};

Settings defaults() { return Settings{}; }

TEST(NcclDispatch, TableOfDecisions) {
  CallInfo inPlace = call(Call::kAllReduce, 1024, 1);
  inPlace.inplace = true;
  CallInfo grouped = call(Call::kSend, 256, 2);
  grouped.grouped = true;
  CallInfo self = call(Call::kSend, 256, 2);
  self.toSelf = true;
  CallInfo capturedSend = call(Call::kSend, 256, 2);
  capturedSend.capturing = true;
  CallInfo groupedSelf = self;
  groupedSelf.grouped = true;
  CallInfo groupedSelf8 = groupedSelf;
  groupedSelf8.worldSize = groupedSelf8.ranksPerNode = 8;
  CallInfo broadcastRoot1 = call(Call::kBroadcast, 1024);
  broadcastRoot1.root = 1;
  CallInfo allGatherInPlace = call(Call::kAllGather, 1 << 20);
  allGatherInPlace.inplace = true;
  CallInfo twoNodes = call(Call::kAllReduce, 1 << 18, 8);
  CallInfo reduceToRoot3 = call(Call::kReduce, 1024);
  reduceToRoot3.root = 3;
  twoNodes.ranksPerNode = 4;
  const Row rows[] = {
      {"all-reduce 1 MiB fp32 on 8 ranks", call(Call::kAllReduce, 1 << 18), Route::kLoom, Reason::kPlan, "allreduce"},
      {"all-reduce bf16 on 2 ranks", call(Call::kAllReduce, 4096, 2, ncclBfloat16), Route::kLoom, Reason::kPlan,
       "allreduce"},
      {"all-reduce on 2 nodes of 4", twoNodes, Route::kLoom, Reason::kPlan, "allreduce"},
      {"count 0", call(Call::kAllReduce, 0), Route::kNothing, Reason::kEmpty},
      {"one rank, in place", inPlace, Route::kNothing, Reason::kSingleRankInPlace},
      {"one rank, out of place", call(Call::kAllReduce, 1024, 1), Route::kLocalCopy, Reason::kSingleRankCopy},
      {"one rank, prod of float64", call(Call::kAllReduce, 8, 1, ncclFloat64, ncclProd), Route::kLocalCopy,
       Reason::kSingleRankCopy},
      {"one rank, reduce", call(Call::kReduce, 8, 1), Route::kLocalCopy, Reason::kSingleRankCopy},
      {"one rank, custom op", call(Call::kAllReduce, 8, 1, ncclFloat32, ncclRedOp_t(ncclNumOps)), Route::kForward,
       Reason::kCustomOp},
      {"prod", call(Call::kAllReduce, 1024, 8, ncclFloat32, ncclProd), Route::kForward, Reason::kOpMissing},
      {"avg of float32: a sum plan, then 1/n", call(Call::kReduceScatter, 1024, 8, ncclFloat32, ncclAvg), Route::kLoom,
       Reason::kPlan, "reducescatter"},
      {"avg of bfloat16", call(Call::kAllReduce, 4096, 2, ncclBfloat16, ncclAvg), Route::kLoom, Reason::kPlan,
       "allreduce"},
      {"avg of int32 (NCCL truncates)", call(Call::kAllReduce, 1024, 8, ncclInt32, ncclAvg), Route::kForward,
       Reason::kOpMissing},
      {"max: the bundled plans sum", call(Call::kAllReduce, 1024, 8, ncclFloat32, ncclMax), Route::kForward,
       Reason::kNoPlan},
      {"float64 all-reduce", call(Call::kAllReduce, 1024, 8, ncclFloat64), Route::kForward, Reason::kTypeMissing},
      {"int64 all-reduce", call(Call::kAllReduce, 1024, 8, ncclInt64), Route::kForward, Reason::kTypeMissing},
      {"int8 all-gather moves bytes", call(Call::kAllGather, 1 << 20, 8, ncclInt8), Route::kLoom, Reason::kPlan,
       "allgather"},
      {"float64 all-gather in place", allGatherInPlace, Route::kLoom, Reason::kPlan, "allgather"},
      {"reduce to root 0: bundled", call(Call::kReduce, 1024), Route::kLoom, Reason::kPlan, "reduce"},
      {"reduce to root 3: no bundled plan (the library's JIT compiles one)", reduceToRoot3, Route::kForward,
       Reason::kNoPlan},
      {"reduce, prod", call(Call::kReduce, 1024, 8, ncclFloat32, ncclProd), Route::kForward, Reason::kOpMissing},
      // Gather and scatter go over the point-to-point path: on more than two ranks over the pairs' links.
      {"gather on 8 ranks", call(Call::kGather, 1024), Route::kLoom, Reason::kPointToPointLink},
      {"scatter on 8 ranks", call(Call::kScatter, 1024), Route::kLoom, Reason::kPointToPointLink},
      {"gather on 2 ranks", call(Call::kGather, 1024, 2), Route::kLoom, Reason::kPlan, "alltoallv"},
      // Send/recv run on the pair's bundled all-to-all-v plan (no Python needed).
      {"send on 2 ranks", call(Call::kSend, 256, 2), Route::kLoom, Reason::kPlan, "alltoallv"},
      {"recv on 2 ranks", call(Call::kRecv, 256, 2), Route::kLoom, Reason::kPlan, "alltoallv"},
      {"send in a group", grouped, Route::kLoom, Reason::kPlan, "alltoallv"},
      {"send while capturing", capturedSend, Route::kLoom, Reason::kPlan, "alltoallv"},
      {"send on 8 ranks: over the pair's link", call(Call::kSend, 256, 8), Route::kLoom, Reason::kPointToPointLink},
      {"send to itself alone", self, Route::kForward, Reason::kPointToPointSelf},
      {"send to itself in a group: a local copy", groupedSelf, Route::kLoom, Reason::kPointToPointSelf},
      {"send to itself in a group of 8 ranks", groupedSelf8, Route::kLoom, Reason::kPointToPointSelf},
      {"all-reduce on 3 ranks", call(Call::kAllReduce, 1024, 3), Route::kForward, Reason::kNoPlan},
      {"all-reduce of 4 GiB", call(Call::kAllReduce, uint64_t(1) << 30), Route::kForward, Reason::kNoPlan},
      {"broadcast from rank 0", call(Call::kBroadcast, 1024), Route::kLoom, Reason::kPlan, "broadcast"},
      {"broadcast from rank 1", broadcastRoot1, Route::kForward, Reason::kNoPlan},
      {"all-to-all on 4 ranks", call(Call::kAllToAll, 1024, 4), Route::kLoom, Reason::kPlan, "alltoall"},
      {"reduce-scatter on 8 ranks", call(Call::kReduceScatter, 4096), Route::kLoom, Reason::kPlan, "reducescatter"},
  };
  for (const Row& row : rows) {
    const Decision decision = decide(row.info, defaults(), Capabilities{}, bundled());
    const std::string text = describe(row.info, decision);
    EXPECT_EQ(routeName(decision.route), routeName(row.route)) << row.what << ": " << text;
    EXPECT_EQ(reasonName(decision.reason), reasonName(row.reason)) << row.what << ": " << text;
    if (row.reason == Reason::kPlan) {
      ASSERT_TRUE(decision.plan) << row.what;
      EXPECT_EQ(decision.plan->name.rfind(row.planPrefix, 0), 0u) << row.what << ": " << decision.plan->name;
    }
  }
}

TEST(NcclDispatch, SettingsAndCapabilities) {
  const CallInfo allReduce = call(Call::kAllReduce, 1 << 18);
  Settings forced;
  forced.forceNccl = true;
  EXPECT_EQ(decide(allReduce, forced, Capabilities{}, bundled()).reason, Reason::kForced);

  Settings onlyGather;
  onlyGather.loomCollectives = parseCollectiveList("allgather", "LOOM_NCCL_COLLECTIVES");
  EXPECT_EQ(decide(allReduce, onlyGather, Capabilities{}, bundled()).reason, Reason::kNotListed);
  EXPECT_EQ(decide(call(Call::kAllGather, 1 << 18), onlyGather, Capabilities{}, bundled()).route, Route::kLoom);

  Capabilities loomOff{false, true};
  EXPECT_EQ(decide(allReduce, defaults(), loomOff, bundled()).reason, Reason::kLoomOff);

  // What must be forwarded fails when there is no real NCCL, and says why.
  Capabilities noReal{true, false};
  const CallInfo prod = call(Call::kAllReduce, 1024, 8, ncclFloat32, ncclProd);
  const Decision fail = decide(prod, defaults(), noReal, bundled());
  EXPECT_EQ(fail.route, Route::kFail);
  EXPECT_NE(describe(prod, fail).find("Loom reduces with sum, min, max and (floating types) avg, not prod"),
            std::string::npos)
      << describe(prod, fail);
  // ... while what Loom runs still runs.
  EXPECT_EQ(decide(allReduce, defaults(), noReal, bundled()).route, Route::kLoom);
}

// With an all-to-all-v plan of two ranks registered, every send and receive takes it, alone or grouped,
// eager or captured (nothing is allocated per call: bytes go into the receiver's own buffer).
TEST(NcclDispatch, PointToPointTakesTheAllToAllVPlanOfThePair) {
  PlanRegistry registry;
  auto plan = std::make_shared<const Plan>(
      Plan::load(std::string(LOOM_SOURCE_DIR) + "/tests/data/plans/good/alltoallv_fullmesh_2r.json"));
  registry.add(plan, planInfoFrom(*plan));
  for (Call kind : {Call::kSend, Call::kRecv}) {
    for (bool grouped : {false, true}) {
      for (bool capturing : {false, true}) {
        CallInfo info = call(kind, 1 << 20, 2, ncclBfloat16);
        info.grouped = grouped;
        info.capturing = capturing;
        const Decision decision = decide(info, defaults(), Capabilities{}, registry);
        EXPECT_EQ(decision.route, Route::kLoom) << describe(info, decision);
        ASSERT_TRUE(decision.plan);
        EXPECT_EQ(decision.plan->name, plan->name);
        EXPECT_EQ(decision.collective, Collective::kAllToAllV);
      }
    }
  }
  Settings noPointToPoint;
  noPointToPoint.loomCollectives = parseCollectiveList("allreduce", "LOOM_NCCL_COLLECTIVES");
  EXPECT_EQ(decide(call(Call::kSend, 256, 2), noPointToPoint, Capabilities{}, registry).reason, Reason::kNotListed);
}

TEST(NcclDispatch, DescribeNamesTheRequest) {
  const CallInfo odd = call(Call::kAllReduce, 1024, 3);
  const std::string text = describe(odd, decide(odd, defaults(), Capabilities{}, bundled()));
  EXPECT_EQ(
      text,
      "AllReduce 1024 x float32 sum out of place: forwarded to NCCL: no Loom plan fits (allreduce, 3 ranks, 3 per "
      "node, 4 KiB in, out of place, sum)");
}

TEST(NcclSettings, StrictBooleans) {
  for (const char* yes : {"1", "true", "YES", "On"}) EXPECT_EQ(parseStrictBoolean(yes), true) << yes;
  for (const char* no : {"0", "false", "No", "OFF"}) EXPECT_EQ(parseStrictBoolean(no), false) << no;
  for (const char* bad : {"", "2", "y", "enable", " 1"}) EXPECT_FALSE(parseStrictBoolean(bad).has_value()) << bad;
}

TEST(NcclSettings, EnvironmentErrorsNameTheVariable) {
  setenv("LOOM_NCCL_FORCE_NCCL", "maybe", 1);
  try {
    settingsFromEnvironment();
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()), "LOOM_NCCL_FORCE_NCCL='maybe': expected 1/0, true/false, yes/no or on/off");
  }
  unsetenv("LOOM_NCCL_FORCE_NCCL");
  setenv("LOOM_NCCL_COLLECTIVES", "allreduce,gather", 1);
  EXPECT_THROW(settingsFromEnvironment(), Error);
  setenv("LOOM_NCCL_COLLECTIVES", "reduce", 1);
  EXPECT_TRUE(settingsFromEnvironment().allowsOnLoom(Collective::kReduce));
  EXPECT_FALSE(settingsFromEnvironment().allowsOnLoom(Collective::kBroadcast));
  setenv("LOOM_NCCL_COLLECTIVES", " AllReduce , sendrecv", 1);
  const Settings listed = settingsFromEnvironment();
  EXPECT_TRUE(listed.allowsOnLoom(Collective::kAllReduce));
  EXPECT_TRUE(listed.allowsOnLoom(Collective::kSendRecv));
  EXPECT_FALSE(listed.allowsOnLoom(Collective::kAllGather));
  unsetenv("LOOM_NCCL_COLLECTIVES");
  unsetenv("LOOM_NCCL_DEBUG");
  unsetenv("NCCL_DEBUG");
  EXPECT_EQ(settingsFromEnvironment().logLevel, LogLevel::kWarn);  // neither variable set
  setenv("LOOM_NCCL_DEBUG", "LOUD", 1);
  EXPECT_THROW(settingsFromEnvironment(), Error);
  setenv("LOOM_NCCL_DEBUG", "info", 1);
  EXPECT_EQ(settingsFromEnvironment().logLevel, LogLevel::kInfo);
  unsetenv("LOOM_NCCL_DEBUG");
  setenv("NCCL_DEBUG", "ABORT", 1);  // NCCL's own value: not an error here
  EXPECT_EQ(settingsFromEnvironment().logLevel, LogLevel::kNone);
  unsetenv("NCCL_DEBUG");
}

TEST(NcclUniqueId, RoundTripAndRefusals) {
  const UniqueId id = UniqueId::fromAddress("127.0.0.1:29555", UniqueId::randomSecret());
  const ncclUniqueId encoded = encodeUniqueId(id);
  EXPECT_EQ(std::string(encoded.internal, 8), "LOOMNCCL");
  EXPECT_EQ(decodeUniqueId(encoded), id);
  for (size_t i = 16 + UniqueId::kBytes; i < sizeof(encoded.internal); ++i) EXPECT_EQ(encoded.internal[i], 0);

  ncclUniqueId foreign = encoded;
  std::memcpy(foreign.internal, "NCCLXXXX", 8);
  EXPECT_THROW(decodeUniqueId(foreign), Error);
  ncclUniqueId future = encoded;
  future.internal[8] = 2;
  try {
    decodeUniqueId(future);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("format version 2"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace loom::nccl

namespace loom::nccl {
namespace {

TEST(NcclDispatch, AverageIsASumThenAScale) {
  const Decision average =
      decide(call(Call::kAllReduce, 4096, 2, ncclFloat16, ncclAvg), defaults(), Capabilities{}, bundled());
  EXPECT_TRUE(average.average);
  EXPECT_EQ(average.op, ReduceOp::kSum);
  EXPECT_EQ(average.dataType, DataType::kFloat16);
  EXPECT_FALSE(decide(call(Call::kAllReduce, 4096, 2), defaults(), Capabilities{}, bundled()).average);
  const CallInfo integers = call(Call::kAllReduce, 1024, 8, ncclUint32, ncclAvg);
  EXPECT_NE(describe(integers, decide(integers, defaults(), Capabilities{}, bundled())).find("not avg of uint32"),
            std::string::npos);
}

TEST(NcclDispatch, ReduceAsksForAnInPlacePlanOfItsRoot) {
  // Every rank asks for the same plan: a non-root rank cannot know whether the root's recvbuff is its
  // sendbuff, so the request is in place whatever the caller's buffers are (the root copies first).
  CallInfo reduce = call(Call::kReduce, 1024, 4, ncclFloat32, ncclMax);
  reduce.root = 3;
  reduce.inplace = false;
  const SelectionRequest request = selectionRequestFor(reduce, Collective::kReduce, DataType::kFloat32, ReduceOp::kMax);
  EXPECT_EQ(request.collective, Collective::kReduce);
  EXPECT_TRUE(request.inplace);
  ASSERT_TRUE(request.root.has_value());
  EXPECT_EQ(*request.root, 3u);
  EXPECT_EQ(request.op, ReduceOp::kMax);
  EXPECT_EQ(request.messageBytes, 4096u);
  CallInfo average = call(Call::kReduce, 1024, 4, ncclBfloat16, ncclAvg);
  const Decision decision = decide(average, defaults(), Capabilities{}, bundled());
  EXPECT_TRUE(decision.average);
  EXPECT_EQ(decision.op, ReduceOp::kSum);
}

}  // namespace
}  // namespace loom::nccl
