#pragma once

// Ranks that disagree on a call (another plan, collective, size, data type or operator) would pair
// up channels and buffers that do not match: wrong results, a write past a peer's scratch, or a
// wait that only a timeout ends. Where ranks meet anyway, they compare what they are about to run
// and every rank raises the same clear error instead:
//
//   - every call of a plan bound to user buffers (its per-call exchange carries the shape and where
//     each rank's input and output are, from which every rank keys its contexts the same way);
//   - the first call of each shape of any other plan (context setup, keyed by the shape).
//
// A disagreement between two shapes that every rank has set up before is not seen by a plan that
// reaches only peers' scratch; there a device-side wait times out, naming rank, block, op, channel.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "loom/communicator.hpp"
#include "loom/data_type.hpp"
#include "loom/host_board.hpp"
#include "loom/plan.hpp"

namespace loom {

struct CallShape {
  uint64_t planHash = 0;
  uint64_t messageBytes = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

// Where one rank's input and output are this call: addresses, the ids of the allocations that hold
// them (0: memory the backend cannot name), their bytes (a counted call's differ from rank to rank), and
// the symmetric windows they lie in (symmetric_windows.hpp; 0: none).
struct RankBuffers {
  uint64_t input = 0;
  uint64_t output = 0;
  uint64_t inputAllocation = 0;
  uint64_t outputAllocation = 0;
  uint64_t inputBytes = 0;
  uint64_t outputBytes = 0;
  uint64_t inputWindow = 0;
  uint64_t outputWindow = 0;
  bool operator==(const RankBuffers&) const = default;
};

// Collective: every rank sends its shape (and, when given, its buffers) and checks every other's;
// throws InvalidArgument naming the ranks that differ and how. Returns every rank's buffers, by rank
// (empty when `buffers` is not given). Over `board` when given (ranks of one host: no TCP round
// trip), else over the bootstrap.
std::vector<RankBuffers> agreeOnCall(Communicator& communicator, HostBoard* board, const Plan& plan,
                                     const CallShape& mine, const std::optional<RankBuffers>& buffers);

// Collective: a board for these records (HostBoard's setup, on `tag`).
std::unique_ptr<HostBoard> makeCallBoard(Communicator& communicator, uint64_t tag);

}  // namespace loom
