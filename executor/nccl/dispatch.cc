#include "dispatch.hpp"

#include <functional>
#include <optional>
#include <set>
#include <unordered_map>

namespace loom::nccl {
namespace {

Decision route(Route how, Reason why) {
  Decision decision;
  decision.route = how;
  decision.reason = why;
  return decision;
}

// The Loom collective that runs a call (gather and scatter go over the point-to-point path), or that
// LOOM_NCCL_COLLECTIVES names for it.
Collective loomCollective(Call call) {
  switch (call) {
    case Call::kAllReduce:
      return Collective::kAllReduce;
    case Call::kAllGather:
      return Collective::kAllGather;
    case Call::kReduceScatter:
      return Collective::kReduceScatter;
    case Call::kBroadcast:
      return Collective::kBroadcast;
    case Call::kAllToAll:
      return Collective::kAllToAll;
    case Call::kSend:
    case Call::kRecv:
    case Call::kGather:  // over the point-to-point path (point_to_point.hpp)
    case Call::kScatter:
      return Collective::kSendRecv;
    case Call::kReduce:
      return Collective::kReduce;
  }
  return Collective::kAllReduce;  // not reached: every Call is listed
}

bool reduces(Collective collective) {
  return collective == Collective::kAllReduce || collective == Collective::kReduceScatter ||
         collective == Collective::kReduce;
}

std::optional<DataType> loomType(ncclDataType_t type) {
  switch (type) {
    case ncclFloat32:
      return DataType::kFloat32;
    case ncclFloat16:
      return DataType::kFloat16;
    case ncclBfloat16:
      return DataType::kBFloat16;
    case ncclInt32:
      return DataType::kInt32;
    case ncclUint32:
      return DataType::kUInt32;
    case ncclFloat8e4m3:
      return DataType::kFloat8E4M3;
    case ncclFloat8e5m2:
      return DataType::kFloat8E5M2;
    default:
      return std::nullopt;
  }
}

// Collectives that only move data do not look at the type: the bytes move as the widest Loom type
// that divides them, so that int8, int64 and float64 calls run on Loom too.
DataType byteType(uint64_t bytes) {
  if (bytes % 4 == 0) return DataType::kUInt32;
  if (bytes % 2 == 0) return DataType::kFloat16;
  return DataType::kFloat8E4M3;
}

bool isFloating(DataType type) { return type != DataType::kInt32 && type != DataType::kUInt32; }

std::optional<ReduceOp> loomOp(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return ReduceOp::kSum;
    case ncclMax:
      return ReduceOp::kMax;
    case ncclMin:
      return ReduceOp::kMin;
    default:
      return std::nullopt;
  }
}

// Cached per plan content on each thread, so that the hot path does not walk the plan.
// The plan's operator, remembered per plan: a call must not scan the plan's ops.
std::optional<ReduceOp> cachedPlanReduceOp(const Plan& plan) {
  thread_local std::unordered_map<uint64_t, std::optional<ReduceOp>> cache;
  auto found = cache.find(plan.contentHash);
  if (found != cache.end()) return found->second;
  return cache.emplace(plan.contentHash, planReduceOp(plan)).first->second;
}

uint64_t inputBytes(const CallInfo& call) {
  const uint64_t bytes = call.count * ncclTypeBytes(call.dataType);
  if (call.call == Call::kReduceScatter || call.call == Call::kAllToAll) return bytes * call.worldSize;
  return bytes;
}

}  // namespace

std::string_view callName(Call call) {
  switch (call) {
    case Call::kAllReduce:
      return "AllReduce";
    case Call::kAllGather:
      return "AllGather";
    case Call::kReduceScatter:
      return "ReduceScatter";
    case Call::kBroadcast:
      return "Broadcast";
    case Call::kReduce:
      return "Reduce";
    case Call::kAllToAll:
      return "AlltoAll";
    case Call::kGather:
      return "Gather";
    case Call::kScatter:
      return "Scatter";
    case Call::kSend:
      return "Send";
    case Call::kRecv:
      return "Recv";
  }
  return "?";
}

std::string_view routeName(Route route) {
  switch (route) {
    case Route::kNothing:
      return "nothing";
    case Route::kLocalCopy:
      return "local_copy";
    case Route::kLoom:
      return "loom";
    case Route::kForward:
      return "nccl";
    case Route::kFail:
      return "error";
  }
  return "?";
}

std::string_view reasonName(Reason reason) {
  switch (reason) {
    case Reason::kPlan:
      return "plan";
    case Reason::kEmpty:
      return "empty";
    case Reason::kSingleRankInPlace:
      return "single_rank_in_place";
    case Reason::kSingleRankCopy:
      return "single_rank_copy";
    case Reason::kCustomOp:
      return "custom_op";
    case Reason::kLoomOff:
      return "loom_off";
    case Reason::kForced:
      return "forced";
    case Reason::kPointToPointSelf:
      return "point_to_point_self";
    case Reason::kPointToPointLink:
      return "point_to_point_link";
    case Reason::kNotListed:
      return "not_listed";
    case Reason::kOpMissing:
      return "op_missing";
    case Reason::kTypeMissing:
      return "type_missing";
    case Reason::kBadByteCount:
      return "bad_byte_count";
    case Reason::kNoPlan:
      return "no_plan";
    case Reason::kPlanOpDiffers:
      return "plan_op_differs";
    case Reason::kJitFailed:
      return "jit_failed";
  }
  return "?";
}

uint32_t ncclTypeBytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

std::string_view ncclTypeName(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return "int8";
    case ncclUint8:
      return "uint8";
    case ncclInt32:
      return "int32";
    case ncclUint32:
      return "uint32";
    case ncclInt64:
      return "int64";
    case ncclUint64:
      return "uint64";
    case ncclFloat16:
      return "float16";
    case ncclFloat32:
      return "float32";
    case ncclFloat64:
      return "float64";
    case ncclBfloat16:
      return "bfloat16";
    case ncclFloat8e4m3:
      return "float8_e4m3";
    case ncclFloat8e5m2:
      return "float8_e5m2";
    default:
      return "unknown type";
  }
}

std::string ncclOpName(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return "sum";
    case ncclProd:
      return "prod";
    case ncclMax:
      return "max";
    case ncclMin:
      return "min";
    case ncclAvg:
      return "avg";
    default:
      return "custom op " + std::to_string(int(op));
  }
}

SelectionRequest selectionRequestFor(const CallInfo& call, Collective collective, DataType type, ReduceOp op) {
  SelectionRequest request;
  request.collective = collective;
  request.messageBytes = inputBytes(call);
  request.dataType = type;
  request.worldSize = call.worldSize;
  request.ranksPerNode = call.ranksPerNode;
  // Broadcast and Reduce always run an in-place plan (the root copies first), so that ranks that pass
  // different buffers still agree on one plan: a non-root rank of a Reduce cannot know whether the
  // root's recvbuff is its sendbuff.
  const bool rooted = collective == Collective::kBroadcast || collective == Collective::kReduce;
  request.inplace = rooted ? true : call.inplace;
  request.capturing = call.capturing;
  request.op = op;
  if (rooted) request.root = uint32_t(call.root);
  request.placement = call.placement;
  return request;
}

Decision decide(const CallInfo& call, const Settings& settings, const Capabilities& capabilities,
                PlanRegistry& registry) {
  const bool pointToPoint = call.call == Call::kSend || call.call == Call::kRecv;
  const bool reducing =
      call.call == Call::kAllReduce || call.call == Call::kReduceScatter || call.call == Call::kReduce;
  Decision decision;  // filled in as the call is understood, so that a forward says what was asked
  auto forward = [&](Reason why) {
    Decision out = decision;
    out.route = capabilities.realNccl ? Route::kForward : Route::kFail;
    out.reason = why;
    return out;
  };

  if (call.count == 0) return route(Route::kNothing, Reason::kEmpty);
  // A custom operator (ncclRedOpCreatePreMulSum) scales, even on one rank: only NCCL knows it.
  if (reducing && int(call.op) >= int(ncclNumOps)) return forward(Reason::kCustomOp);
  // One rank: every built-in collective is the identity (sum, prod, min, max and avg of one value).
  if (call.worldSize == 1 && !pointToPoint) {
    return route(call.inplace ? Route::kNothing : Route::kLocalCopy,
                 call.inplace ? Reason::kSingleRankInPlace : Reason::kSingleRankCopy);
  }
  if (settings.forceNccl) return forward(Reason::kForced);
  if (!capabilities.loom) return forward(Reason::kLoomOff);
  const Collective collective = loomCollective(call.call);
  decision.collective = collective;
  // Alone, a send to itself would wait for its receive (NCCL's too); in a group the two pair up into a
  // local copy (point_to_point.hpp), on a communicator of any size.
  if (pointToPoint && call.toSelf && !call.grouped) return forward(Reason::kPointToPointSelf);
  // Gather and scatter are sends and receives between the root and each rank.
  const bool overPointToPoint = pointToPoint || call.call == Call::kGather || call.call == Call::kScatter;
  if (!settings.allowsOnLoom(collective)) return forward(Reason::kNotListed);
  if (overPointToPoint) {
    // Sends and receives, alone or grouped, run as counted calls of an all-to-all-v plan of the two ranks
    // (point_to_point.hpp): both ends of a message take this route, whatever each one's grouping. On more
    // than two ranks, over a link of the pair, where the plan is chosen.
    decision.collective = Collective::kAllToAllV;
    if (call.toSelf || call.worldSize != 2) {
      decision.route = Route::kLoom;
      decision.reason = call.toSelf ? Reason::kPointToPointSelf : Reason::kPointToPointLink;
      return decision;
    }
  }

  if (reduces(collective)) {
    const auto type = loomType(call.dataType);
    // An average is a sum scaled by 1/n afterwards, which integers (whose average NCCL truncates) do not take.
    decision.average = call.op == ncclAvg && type && isFloating(*type);
    const auto op = decision.average ? std::optional<ReduceOp>(ReduceOp::kSum) : loomOp(call.op);
    if (!op) return forward(Reason::kOpMissing);
    if (!type) return forward(Reason::kTypeMissing);
    decision.op = *op;
    decision.dataType = *type;
  } else {
    decision.dataType = byteType(inputBytes(call));
  }
  const SelectionRequest request = selectionRequestFor(call, decision.collective, decision.dataType, decision.op);
  decision.plan = registry.select(request);
  if (!decision.plan) return forward(Reason::kNoPlan);
  decision.messageBytes = request.messageBytes;
  decision.inplace = request.inplace;
  if (reduces(collective)) {
    const auto planOp = cachedPlanReduceOp(*decision.plan);
    if (planOp && *planOp != decision.op) return forward(Reason::kPlanOpDiffers);
  }
  decision.route = Route::kLoom;
  decision.reason = Reason::kPlan;
  return decision;
}

namespace {

std::string bytesText(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  uint64_t whole = bytes;
  while (whole >= 1024 && whole % 1024 == 0 && unit < 4) {
    whole /= 1024;
    ++unit;
  }
  return std::to_string(whole) + " " + units[unit];
}

// "; passed over 'NAME': why" for each registered plan that fits the call but not where it runs.
std::string passedOverText(const SelectionRequest& request) {
  std::string text;
  for (const PlanEntry& entry : PlanRegistry::global().passedOver(request)) {
    text += "; passed over '" + entry->info.name + "': " + placementShortfall(entry->info, request.placement);
  }
  return text;
}

std::string why(const CallInfo& call, const Decision& decision) {
  switch (decision.reason) {
    case Reason::kPlan: {
      // Where the plan comes from, as `loom select` says it, and what was passed over for not fitting.
      std::string source = "compiled on first use (JIT)";
      if (const PlanEntry entry = PlanRegistry::global().find(decision.plan->name)) {
        source = entry->info.source == PlanSource::kUser    ? "a user plan"
                 : entry->info.source == PlanSource::kTuned ? "this machine's tuned table"
                                                            : "the bundled table";
      }
      const SelectionRequest request = selectionRequestFor(call, decision.collective, decision.dataType, decision.op);
      return "Loom plan '" + decision.plan->name + "' (" + source + ")" + passedOverText(request);
    }
    case Reason::kEmpty:
      return "nothing to do (count 0)";
    case Reason::kSingleRankInPlace:
      return "nothing to do (one rank, in place)";
    case Reason::kSingleRankCopy:
      return "a local copy (one rank)";
    case Reason::kCustomOp:
      return ncclOpName(call.op) + " (from ncclRedOpCreatePreMulSum) is known to NCCL only";
    case Reason::kLoomOff:
      return "Loom's side is off on this communicator";
    case Reason::kForced:
      return "LOOM_NCCL_FORCE_NCCL is set";
    case Reason::kPointToPointLink:
      return "a send/recv over the link of the two ranks (a communicator of two, made by their first message)";
    case Reason::kPointToPointSelf:
      return call.grouped ? "a send/recv of this rank to itself, paired in its group: a local copy"
                          : "a send/recv of this rank to itself outside a group";
    case Reason::kNotListed:
      return std::string(collectiveName(decision.collective)) + " is not in LOOM_NCCL_COLLECTIVES";
    case Reason::kOpMissing:
      return "Loom reduces with sum, min, max and (floating types) avg, not " + ncclOpName(call.op) +
             (call.op == ncclAvg ? " of " + std::string(ncclTypeName(call.dataType)) : std::string());
    case Reason::kTypeMissing:
      return "Loom does not reduce " + std::string(ncclTypeName(call.dataType)) +
             " (float32, float16, bfloat16, int32, uint32, float8)";
    case Reason::kBadByteCount:
      return "no Loom type divides the byte count";
    case Reason::kNoPlan: {
      const SelectionRequest request = selectionRequestFor(call, decision.collective, decision.dataType, decision.op);
      return "no Loom plan fits (" + std::string(collectiveName(request.collective)) + ", " +
             std::to_string(request.worldSize) + " ranks, " + std::to_string(request.ranksPerNode) + " per node, " +
             bytesText(request.messageBytes) + " in, " + (request.inplace ? "in place" : "out of place") +
             (request.capturing ? ", capturing" : "") +
             (request.root ? ", root " + std::to_string(*request.root) : std::string()) +
             (reduces(request.collective) ? ", " + std::string(reduceOpName(request.op)) : std::string()) + ")" +
             passedOverText(request);
    }
    case Reason::kJitFailed:
      return "no Loom plan fits, and none could be compiled for this shape (LOOM WARN said why)";
    case Reason::kPlanOpDiffers:
      return "the plan that fits ('" + (decision.plan ? decision.plan->name : std::string("?")) +
             "') reduces with another operator than " + ncclOpName(call.op);
  }
  return "?";
}

}  // namespace

std::string describe(const CallInfo& call, const Decision& decision) {
  std::string text = std::string(callName(call.call)) + " " + std::to_string(call.count) + " x " +
                     std::string(ncclTypeName(call.dataType));
  if (call.call == Call::kAllReduce || call.call == Call::kReduceScatter || call.call == Call::kReduce) {
    text.append(" ").append(ncclOpName(call.op));
  }
  text += call.inplace ? " in place" : " out of place";
  if (call.capturing) text += " (capturing)";
  switch (decision.route) {
    case Route::kLoom:
    case Route::kNothing:
    case Route::kLocalCopy:
      return text + ": " + why(call, decision);
    case Route::kForward:
      return text + ": forwarded to NCCL: " + why(call, decision);
    case Route::kFail:
      return text + ": needs the real NCCL (" + why(call, decision) + "), which is not available";
  }
  return text;
}

}  // namespace loom::nccl
