#pragma once

#include <simdjson.h>

#include <string>

#include "loom/plan.hpp"

namespace loom {

// Parse JSON (with simdjson's padding after it) and build the typed plan, checking types, required/unknown fields,
// enums and ranges. Throws PlanError with the JSON path of the first problem. Cross-references are not checked here.
Plan decodePlan(simdjson::padded_string_view json, const std::string& origin);

}  // namespace loom
