#pragma once

// Plans for calls no registered plan fits on a shape with no bundled plan (3, 5, 6, 7 ranks, ...):
// compiled on first use by Loom's Python compiler (`python -m loom jit-plan`, loom.compiler.jit_plans,
// which caches them by content hash), on rank 0, whose plan text every rank takes over the
// communicator's bootstrap, so all run one plan. The library itself holds no compiler.

#include <memory>
#include <string>

#include "dispatch.hpp"
#include "loom/plan.hpp"

struct ncclComm;

namespace loom::nccl {

// For a call whose decision is kNoPlan: the communicator's own JIT plan that fits, else one compiled now
// (collective over the communicator: every rank of it makes the same call at the same point) and kept on
// the communicator. The plans stay per communicator, not in the process's registry, so that every member
// of a communicator takes the same steps whatever other communicators its process holds. Fills
// `decision` for the plan and returns true; false when none could be had (said once, in the log, and not
// tried again for that collective).
bool useJitPlan(ncclComm& comm, const CallInfo& call, Decision& decision);

}  // namespace loom::nccl
