#pragma once

// Runs the ranks of a job on threads of this process, one Communicator each, over loopback.

#include <memory>

#include "bootstrap_test_util.hpp"
#include "loom/communicator.hpp"

namespace loom::testing {

// Every rank of 0..worldSize-1 creates a Communicator (with the InfiniBand configuration
// `configOf(rank)`) and runs `body` on it; outcomes by rank.
inline std::vector<RankOutcome> runCommunicators(int worldSize, const std::function<IbConfig(int)>& configOf,
                                                 const std::function<void(Communicator&)>& body,
                                                 int64_t timeoutMs = 10000) {
  UniqueId id = UniqueId::create("127.0.0.1");
  return runRanks(worldSize, id, timeoutMs, allRanks(worldSize), [&](Bootstrap& bootstrap) {
    const int rank = bootstrap.rank();
    // Host memory only, also on a host with GPUs: these tests run ranks on host threads.
    Communicator communicator(std::make_shared<Bootstrap>(std::move(bootstrap)), configOf(rank),
                              Communicator::kHostOnly);
    body(communicator);
  });
}

inline std::vector<RankOutcome> runCommunicators(int worldSize, const std::function<void(Communicator&)>& body,
                                                 int64_t timeoutMs = 10000) {
  return runCommunicators(
      worldSize, [](int) { return IbConfig{}; }, body, timeoutMs);
}

}  // namespace loom::testing
