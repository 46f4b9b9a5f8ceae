#pragma once

// Ending the waits on a peer whose process is gone, or whose call failed (it announced the failure over the
// bootstrap: Bootstrap::announceFailure; every wait of the communicator then ends, naming it). The host
// learns of a departure first (its bootstrap
// connection closed); a wait on the peer, in a GPU kernel or on a CPU backend thread, sees it only once
// the host marks it in the communicator's diagnostics record (DeviceDiagnostics::notePeerGone). A
// peer is marked after it has been gone for kGrace, so that what it sent before it went can still land
// (a port channel's connection may lag the bootstrap's).

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/bootstrap.hpp"
#include "loom/device_diagnostics.hpp"

namespace loom {

// The bookkeeping: which peers were first seen gone when.
class DepartureMarks {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kPoll = std::chrono::milliseconds(100);
  static constexpr auto kGrace = std::chrono::milliseconds(200);

  explicit DepartureMarks(DeviceDiagnostics& diagnostics) : diagnostics_(diagnostics) {}
  // One look: `departed` are the peers gone now, `lost` those of them that went without a goodbye, `aborted`
  // those that announced an abort; those gone for kGrace are marked (DeviceDiagnostics::notePeerGone,
  // notePeerLeft after a goodbye, notePeerAborted after an announced abort, at once: it is no guess).
  void look(const std::vector<int>& departed, const std::vector<int>& lost, const std::vector<int>& aborted = {});

 private:
  DeviceDiagnostics& diagnostics_;
  std::map<int, Clock::time_point> goneSince_;
};

// A thread that looks every kPoll, for a communicator with a GPU: its kernels run while no host thread
// waits (the CPU backend's waits run on threads of the call, which looks itself while they run). It asks
// the bootstrap only when no call holds it (a call that waits on a peer learns of the departure itself).
class DepartureWatch {
 public:
  DepartureWatch(Bootstrap& bootstrap, DeviceDiagnostics& diagnostics);
  DepartureWatch(const DepartureWatch&) = delete;
  DepartureWatch& operator=(const DepartureWatch&) = delete;

 private:
  void run(const std::stop_token& stop);

  Bootstrap& bootstrap_;
  DeviceDiagnostics& diagnostics_;
  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::jthread thread_;  // last: stopped and joined before the members it uses go
};

}  // namespace loom
