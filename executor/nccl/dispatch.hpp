#pragma once

// Who runs one NCCL call: a Loom plan, a local copy (world size 1), nothing (an empty or in-place
// call on one rank), or the real NCCL; and why. A pure function of the call, the settings and the
// plan registry, so that the table of decisions is tested without a GPU (tests/nccl/dispatch_test.cc).
// Every rank of a communicator decides alike for the same call: the decision reads nothing that
// differs between ranks but the buffers' in-place relation (which NCCL asks to be the same too).

#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "loom/data_type.hpp"
#include "loom/plan.hpp"
#include "loom/plan_registry.hpp"
#include "settings.hpp"

namespace loom::nccl {

enum class Call : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kGather,
  kScatter,
  kSend,
  kRecv
};
std::string_view callName(Call call);  // "AllReduce", ... as in the ncclXxx names

struct CallInfo {
  Call call = Call::kAllReduce;
  uint64_t count = 0;  // elements as NCCL counts them (per rank for AllGather's send, ReduceScatter's recv)
  ncclDataType_t dataType = ncclFloat32;
  ncclRedOp_t op = ncclSum;  // reducing calls only
  int root = 0;              // Broadcast, Reduce, Gather, Scatter
  uint32_t worldSize = 1;
  uint32_t ranksPerNode = 1;
  bool inplace = false;
  bool capturing = false;  // a CUDA graph is being captured on the call's stream
  bool grouped = false;    // between ncclGroupStart and ncclGroupEnd
  bool toSelf = false;     // Send/Recv whose peer is this rank
  Placement placement;     // where this rank's plans run: those whose blocks do not fit are passed over
};

// What the communicator can do, beside the settings.
struct Capabilities {
  bool loom = true;      // Loom's side is up (false: forced to NCCL)
  bool realNccl = true;  // the real NCCL's communicator is up
};

enum class Route : uint8_t { kNothing, kLocalCopy, kLoom, kForward, kFail };
std::string_view routeName(Route route);

enum class Reason : uint8_t {
  kPlan,   // a plan fits
  kEmpty,  // count 0
  kSingleRankInPlace,
  kSingleRankCopy,
  kCustomOp,           // ncclRedOpCreatePreMulSum's operators
  kLoomOff,            // Loom's side is not up on this communicator
  kForced,             // LOOM_NCCL_FORCE_NCCL
  kPointToPointSelf,   // send/recv of a rank to itself: a local copy inside a group, NCCL's alone
  kPointToPointLink,   // send/recv (gather, scatter) on more than two ranks: over each pair's link, whose plan is
                       // chosen there
  kNotListed,          // not in LOOM_NCCL_COLLECTIVES
  kOpMissing,          // prod, and avg of integers
  kTypeMissing,        // int8, uint8, int64, uint64, float64 in a reduction
  kBadByteCount,       // a byte count Loom's types do not divide (not reached today: 1-byte types divide all)
  kNoPlan,
  kPlanOpDiffers,  // the plan that fits reduces with another operator
  kJitFailed,      // no plan fits a shape without bundled plans, and none could be compiled (jit_plans.hpp)
  // A new reason goes here, and in coverage.hpp's static_assert (its table has room for 32).
};
std::string_view reasonName(Reason reason);  // a stable identifier ("no_plan"), for logs and tests

struct Decision {
  Route route = Route::kForward;
  Reason reason = Reason::kNoPlan;
  std::shared_ptr<const Plan> plan;  // kLoom
  Collective collective = Collective::kAllReduce;
  DataType dataType = DataType::kFloat32;  // kLoom: the type the plan runs with
  ReduceOp op = ReduceOp::kSum;
  uint64_t messageBytes = 0;   // kLoom: Executor::execute's messageBytes (this rank's input)
  bool inplace = false;        // kLoom: whether the plan runs in place (Broadcast and Reduce always do)
  bool average = false;        // kLoom: ncclAvg, run as a sum plan and then the output times 1/n (Reduce: the root's)
  bool jitAtGroupEnd = false;  // grouped, and its plan is to be compiled at ncclGroupEnd (runDeferredJit)
};

// The selection request a call makes (for a Loom collective; `op` for the reducing ones); exposed for
// the tests and the log.
SelectionRequest selectionRequestFor(const CallInfo& call, Collective collective, DataType type, ReduceOp op);

Decision decide(const CallInfo& call, const Settings& settings, const Capabilities& capabilities,
                PlanRegistry& registry);

// One line for the log and for errors: the call, and who runs it or why it goes to NCCL.
std::string describe(const CallInfo& call, const Decision& decision);

// Element bytes of an NCCL type (0 for one out of range).
uint32_t ncclTypeBytes(ncclDataType_t type);
std::string_view ncclTypeName(ncclDataType_t type);
std::string ncclOpName(ncclRedOp_t op);

}  // namespace loom::nccl
