#pragma once

// Plans for calls no registered plan fits on a shape with no bundled plan (3, 5, 6, 7 ranks, ...):
// compiled on first use by Loom's Python compiler (`python -m loom jit-plan`, loom.compiler.jit_plans,
// which caches them by content hash), on rank 0, whose plan text every rank takes over the
// communicator's bootstrap, so all run one plan. The library itself holds no compiler.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dispatch.hpp"
#include "loom/plan.hpp"
#include "loom/plan_registry.hpp"

struct ncclComm;

namespace loom::nccl {

// One communicator's JIT plans (each with its selection metadata, so that a call does not walk the plan)
// and what could not be had: by collective (in place, root) when the shape has no library algorithm or
// the compile failed, and by collective and size when only that size has none (above 1 GiB). Said once.
struct JitPlans {
  struct Kept {
    PlanInfo info;
    std::shared_ptr<const Plan> plan;
  };
  struct Missing {
    Reason reason = Reason::kJitFailed;  // kNoPlan: the library has no algorithm for it, nothing failed
    std::string why;
  };
  std::vector<Kept> plans;
  std::map<std::string, Missing> missing;
  // A pair's eager packet plan (usePacketPlan), apart from `plans`: only send/recv rounds may pick it.
  std::shared_ptr<const Plan> packetPlan;
  bool packetFailed = false;  // its compile failed: said once, not tried again
};

// For a call whose decision is kNoPlan: the communicator's own JIT plan that fits, else one compiled now
// (collective over the communicator: every rank of it makes the same call at the same point) and kept on
// the communicator. The plans stay per communicator, not in the process's registry, so that every member
// of a communicator takes the same steps whatever other communicators its process holds. Fills
// `decision` for the plan and returns true; false when none could be had, with the decision's reason
// kJitFailed (the compile failed: no Python, no loom, an error, a timeout) or kNoPlan (the library has no
// algorithm for this shape or size): said once, in the log, and not tried again (JitPlans). Inside a group
// (call.grouped) nothing is compiled: a plan kept from an earlier call serves, else the decision is marked
// jitAtGroupEnd (and false returned), for ncclGroupEnd to compile it.
bool useJitPlan(ncclComm& comm, const CallInfo& call, Decision& decision);

// The eager packet plan (alltoallv_packet) of `pair`, a communicator of two ranks of one node, for messages
// of up to `capacity` bytes: compiled on first use as useJitPlan compiles (collective over the pair: both
// ends reach it in the same round) and kept on the pair; null when it could not be had (said once).
std::shared_ptr<const Plan> usePacketPlan(ncclComm& pair, uint64_t capacity);

}  // namespace loom::nccl
