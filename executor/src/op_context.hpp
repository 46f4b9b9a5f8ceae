#pragma once

// The author's view of a plan op that stopped a call: what a device record's (block, op) is in the plan,
// where the DSL wrote it, and which peers it waits on, so that an error names the line to look at and the
// rank to suspect (the fast path's packet reads do not know their peers; the plan does).

#include <cstdint>
#include <string>

#include "loom/plan.hpp"

namespace loom {

// "; that is thread block 3's op 2, reduce_packet at allreduce.py:41, reading the packets of ranks 1, 2" (or
// "on its channels to rank 1" for other ops), or "" when `block` (the launch's block index, thread blocks in id order) or `op` is not in the
// rank's program.
std::string opContext(const Plan& plan, uint32_t rank, int32_t block, int32_t op);

// The plan op behind a launch's (block, op) of `rank`, with its thread block's id; nullptr when not there.
const Op* locatePlanOp(const Plan& plan, uint32_t rank, int32_t block, int32_t op, uint32_t* threadBlockId = nullptr);

// "thread block 3's op 2, put_packet at allreduce.py:41" for a located op.
std::string planOpName(const Op& op, uint32_t threadBlockId, int32_t index);

}  // namespace loom
