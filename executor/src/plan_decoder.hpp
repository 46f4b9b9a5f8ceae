#pragma once

#include <string>
#include <string_view>

#include "loom/plan.hpp"

namespace loom {

// Parse JSON and build the typed plan, checking types, required/unknown fields, enums and ranges.
// Throws PlanError with the JSON path of the first problem. Cross-references are not checked here.
Plan decodePlan(std::string_view json, const std::string& origin);

}  // namespace loom
