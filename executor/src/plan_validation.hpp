#pragma once

#include <string>

#include "loom/plan.hpp"

namespace loom {

// Checks what a schema cannot: world size and rank ids, chunk indices inside the declared buffers
// (the peer's buffers for remote chunks), channels that exist, have the right type and pair up
// across ranks, unique ids, barriers and semaphores that exist. Throws PlanError with a JSON path.
void validatePlan(const Plan& plan, const std::string& origin);

}  // namespace loom
