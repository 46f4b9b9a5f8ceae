#pragma once

// What a proxy thread is doing now, for the report of a port-channel wait that ran out. The kernel
// only knows that the proxy's tail did not move; this says why from the proxy's side: it is stuck
// inside one step of a trigger (a CUDA or network call that does not return), it has been looking for
// a trigger it never saw (the trigger's valid bit never reached the host), or it is not running.
//
// The proxy thread writes it (a few relaxed stores per step, no lock); a report reads it from another
// thread. The fields are read one by one, so a report made while the proxy moves on may mix two steps:
// good enough for a diagnostic, which is its only use.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace loom {

class ProxyActivity {
 public:
  enum class Step : uint8_t { kStopped, kLooking, kWrite, kSignal, kFlush, kFinishReads };

  // The proxy thread: entering `step` of the trigger at FIFO `position` (for kLooking: the position it
  // looks for), whose connection goes to `peer` (-1: none).
  void enter(Step step, uint64_t position, int peer = -1);
  // The thread ended (or never began).
  void stopped();

  // One clause for a report, e.g. "the proxy thread has been inside the signal of the trigger at position 4
  // (to rank 0) for 29.982 s: a call that has not returned".
  std::string describe() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::atomic<Step> step_{Step::kStopped};
  std::atomic<uint64_t> position_{0};
  std::atomic<int> peer_{-1};
  std::atomic<int64_t> sinceNs_{0};  // Clock time the step began
};

}  // namespace loom
