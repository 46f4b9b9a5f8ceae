#pragma once

// Resolution: a plan, one rank of it and one message size become the flat device program of
// loom/device/program.hpp. Chunk indices turn into byte offsets (buffer_layout.hpp), pipelines are
// unrolled into their iterations, fused and multi-destination ops split into what the interpreter
// runs (data through memory channels in one pass, port destinations as proxy triggers), and every
// byte count is checked: the data ranges of one op must be equally long, so nothing is truncated.

#include <cstdint>
#include <vector>

#include "buffer_layout.hpp"
#include "loom/device/program.hpp"
#include "loom/plan.hpp"

namespace loom {

struct ResolvedProgram {
  std::vector<device::Op> ops;
  std::vector<device::Operand> operands;
  std::vector<uint32_t> blockOps;  // blocks + 1 entries
  std::vector<uint64_t> semaphoreInitialValues;
  uint32_t barriers = 0;
  uint64_t inputBytes = 0;
  uint64_t outputBytes = 0;
  uint64_t scratchBytes = 0;  // this rank's, both LL halves included

  uint32_t blocks() const { return uint32_t(blockOps.size() - 1); }
};

// Throws an InvalidArgument Error for a message size the plan cannot take and an InvalidPlan Error
// naming plan, rank, thread block and op for an op the executor cannot run.
ResolvedProgram resolve(const Plan& plan, uint32_t rank, uint64_t messageBytes);

}  // namespace loom
