#pragma once

// Runs the ranks of a job on threads of this process, one Communicator each, over loopback.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "bootstrap_test_util.hpp"
#include "loom/communicator.hpp"
#include "loom/device/diagnostics.hpp"
#include "loom/device_diagnostics.hpp"

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

// Waits on the host, through the communicator's diagnostics record, for a signal from `peer` that never
// comes (a 60 s timeout): what the record says once the wait ended (a departed or unreachable peer ends
// it early), or "" when it ended without a record.
inline std::string endOfAWaitOn(Communicator& comm, int peer, int channel) {
  device::WaitContext context = comm.deviceDiagnostics().waitContext(channel, peer);
  context.timeoutNs = int64_t(60) * 1000 * 1000 * 1000;
  uint64_t never = 0;
  try {
    device::spinUntil(
        context, device::WaitKind::kSemaphore, 1, 1, [&] { return device::loadAcquire(&never); },
        [](uint64_t value) { return value >= 1; });
  } catch (const std::runtime_error&) {
    // The record says why.
  }
  return comm.deviceDiagnostics().report().value_or("");
}

}  // namespace loom::testing
