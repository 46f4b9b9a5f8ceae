#pragma once

// What a Communicator holds, for the runtime files that build on it (semaphores, channels).

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "connection_factory.hpp"
#include "departure_watch.hpp"
#include "fd_passing.hpp"
#include "loom/communicator.hpp"
#include "loom/device_diagnostics.hpp"
#include "loom/error.hpp"
#include "timeout_announcer.hpp"

namespace loom {

struct Communicator::Impl {
  std::shared_ptr<Bootstrap> bootstrap;
  IbConfig ibConfig;
  std::vector<int> nodes;           // node index of each rank
  std::vector<uint64_t> processes;  // process hash of each rank (ranks as threads share one)
  int nodeCount = 0;
  int localRank = 0;
  int localWorldSize = 0;
  int cudaDevice = -1;
  std::string cudaBusId;            // of cudaDevice; empty for host memory only
  std::vector<std::string> busIds;  // GPU bus id of each rank, empty where host-only
  uint64_t jobKey = 0;
  std::vector<MailboxIdentity> mailboxes;  // each rank's descriptor mailbox (fd_passing.hpp)
  std::unique_ptr<FdMailbox> fdMailbox;    // opened at the first cuMem descriptor sent or received
  std::shared_ptr<IbContext> ibContext;  // opened at the first InfiniBand registration or connection
  // Made at the first connection, channel or semaphore; shared with the connections' failure sinks,
  // which may run on their threads while the communicator goes.
  std::shared_ptr<DeviceDiagnostics> diagnostics;
  std::unique_ptr<TimeoutAnnouncer> announcer;     // with a GPU: says a kernel's timeout on stderr at once
  std::unique_ptr<DepartureWatch> departureWatch;  // with a GPU: ends kernels' waits on a departed peer
  std::mutex mutex;

  int rank() const { return bootstrap->rank(); }
  std::string where() const {
    return "rank " + std::to_string(rank()) + " of " + std::to_string(bootstrap->worldSize());
  }
  void checkPeer(int peer, const char* what) const {
    if (peer < 0 || peer >= bootstrap->worldSize() || peer == rank()) {
      throw Error(ErrorCategory::kInvalidArgument, std::string(what) + " on " + where() + ": peer " +
                                                       std::to_string(peer) + " is not another rank of 0.." +
                                                       std::to_string(bootstrap->worldSize() - 1));
    }
  }
  FdMailbox& mailbox() {
    if (!fdMailbox) fdMailbox = std::make_unique<FdMailbox>(jobKey, rank(), mailboxes);
    return *fdMailbox;
  }
  DeviceDiagnostics& deviceDiagnostics() {
    std::lock_guard lock(mutex);
    if (!diagnostics) {
      diagnostics = std::make_shared<DeviceDiagnostics>(rank(), std::nullopt, cudaDevice >= 0);
      // The CPU backend's waits raise their timeouts themselves; a trapped kernel tells nobody.
      if (cudaDevice >= 0) {
        announcer = std::make_unique<TimeoutAnnouncer>(*diagnostics, std::chrono::milliseconds(100));
        departureWatch = std::make_unique<DepartureWatch>(*bootstrap, *diagnostics);
      }
    }
    return *diagnostics;
  }
  // Sends a registration (and a cuMem allocation's descriptor, to a rank of this host) on a raw
  // bootstrap tag; recvMemoryOn is the other end.
  void sendMemoryOn(const RegisteredMemory& memory, int peer, uint64_t wireTag, uint64_t fdTag);
  RegisteredMemory recvMemoryOn(int peer, uint64_t wireTag, uint64_t fdTag);
  bool sameNode(int peer) const { return nodes[peer] == nodes[rank()]; }

  IbContext& ib() {
    if (!ibContext) ibContext = openIbContext(ibConfig);
    return *ibContext;
  }
};

}  // namespace loom
