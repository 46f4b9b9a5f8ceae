#pragma once

// The device side of semaphores: 64-bit counters that only grow. A signal adds one to the peer's
// inbound counter; a wait raises this side's expected count by one and spins until the inbound
// counter reaches it. Only one thread of a thread block signals or waits on a given semaphore.

#include <cstdint>

#include "loom/device/atomics.hpp"
#include "loom/device/diagnostics.hpp"
#include "loom/device/macros.hpp"

namespace loom::device {

// Raises the expected count by one and spins until the inbound counter reaches it. Polls with
// relaxed loads (cheaper than acquire loads at system scope) and, once the count is there, reads it
// again with acquire ordering: that load synchronises with the signaller's release.
LOOM_HOST_DEVICE void waitForCount(uint64_t* inbound, uint64_t* expected, const WaitContext& context, int32_t op,
                                   bool acquire) {
  const uint64_t target = ++*expected;
  spinUntil(
      context, WaitKind::kSemaphore, op, target, [&] { return loadRelaxed(inbound); },
      [&](uint64_t seen) { return seen >= target; });
  if (acquire) (void)loadAcquire(inbound);
}

// Between two GPUs whose memory is mapped into each other's address space (a memory channel).
struct MemorySemaphoreHandle {
  uint64_t* inbound;        // this rank's counter; the peer adds to it
  uint64_t* expected;       // this rank's count of waits so far (local, only the waiting thread uses it)
  uint64_t* remoteInbound;  // the peer's counter, mapped here
  WaitContext waitContext;

  // The release ordering publishes this thread's earlier writes (and, after a __syncthreads, the
  // block's) to the peer before it can see the new count.
  LOOM_HOST_DEVICE void signal() { addRelease(remoteInbound, uint64_t(1)); }
  // For pure synchronisation: orders nothing but the count itself.
  LOOM_HOST_DEVICE void relaxedSignal() { addRelaxed(remoteInbound, uint64_t(1)); }

  LOOM_HOST_DEVICE void wait(int32_t op = -1) { waitForCount(inbound, expected, waitContext, op, true); }
  LOOM_HOST_DEVICE void relaxedWait(int32_t op = -1) { waitForCount(inbound, expected, waitContext, op, false); }
  LOOM_HOST_DEVICE bool poll() {
    if (loadAcquire(inbound) <= *expected) return false;
    ++*expected;
    return true;
  }
};

// Signalled by the host (a proxy thread writing through a connection), waited on by the GPU.
struct HostSemaphoreHandle {
  uint64_t* inbound;
  uint64_t* expected;
  WaitContext waitContext;

  LOOM_HOST_DEVICE void waitSignal(int32_t op = -1) { waitForCount(inbound, expected, waitContext, op, true); }
};

}  // namespace loom::device
