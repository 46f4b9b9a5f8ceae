#pragma once

// Runs the ranks of a job on threads of this process, one Communicator each, over loopback.

#include <memory>

#include "bootstrap_test_util.hpp"
#include "loom/communicator.hpp"

namespace loom::testing {

// Every rank of 0..worldSize-1 creates a Communicator and runs `body` on it; outcomes by rank.
inline std::vector<RankOutcome> runCommunicators(int worldSize, const std::function<void(Communicator&)>& body,
                                                 int64_t timeoutMs = 10000) {
  UniqueId id = UniqueId::create("127.0.0.1");
  return runRanks(worldSize, id, timeoutMs, allRanks(worldSize), [&](Bootstrap& bootstrap) {
    // Host memory only, also on a host with GPUs: these tests run ranks on host threads.
    Communicator communicator(std::make_shared<Bootstrap>(std::move(bootstrap)), IbConfig{}, Communicator::kHostOnly);
    body(communicator);
  });
}

}  // namespace loom::testing
