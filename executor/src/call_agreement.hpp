#pragma once

// Ranks that disagree on a call (another plan, collective, size, data type or operator) would pair
// up channels and buffers that do not match: wrong results, a write past a peer's scratch, or a
// wait that only a timeout ends. Where ranks meet anyway, they compare what they are about to run
// and every rank raises the same clear error instead:
//
//   - every call of a plan bound to user buffers (its per-call exchange carries the shape);
//   - the first call of each shape of any other plan (context setup, keyed by the shape).
//
// A disagreement between two shapes that every rank has set up before is not seen by a plan that
// reaches only peers' scratch; there a device-side wait times out, naming rank, block, op, channel.

#include <cstdint>
#include <optional>

#include "loom/communicator.hpp"
#include "loom/data_type.hpp"
#include "loom/plan.hpp"

namespace loom {

struct CallShape {
  uint64_t planHash = 0;
  uint64_t messageBytes = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

// Collective: every rank sends its shape (and, when given, whether its context is cached) and
// checks every other's; throws InvalidArgument naming the ranks that differ and how. Returns whether
// every rank reported a cached context (false when `hit` is not given).
bool agreeOnCall(Communicator& communicator, const Plan& plan, const CallShape& mine, std::optional<bool> hit);

}  // namespace loom
