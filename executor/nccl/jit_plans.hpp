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

// Collective over the communicator (every rank makes the same call at the same point): the plan,
// registered as a user plan, or null with `why` set (the same on every rank) when it could not be had.
// Remembers a failure per communicator and (collective, in place, root): the next such call does not try.
std::shared_ptr<const Plan> compileOnFirstUse(ncclComm& comm, const CallInfo& call, const Decision& decision,
                                              std::string* why);

}  // namespace loom::nccl
