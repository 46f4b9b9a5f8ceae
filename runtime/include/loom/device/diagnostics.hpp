#pragma once

// What a kernel leaves behind when a wait runs out of time: a record in mapped host memory that
// the host turns into an Error (loom/device_diagnostics.hpp), written by the first thread that
// times out, before it traps. Waits spin on a local condition and look at the clock only every few
// thousand iterations, so the timeout costs the fast path nothing measurable.

#include <cstdint>

#include "loom/device/atomics.hpp"
#include "loom/device/macros.hpp"

#if !LOOM_DEVICE_PASS
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#endif

namespace loom::device {

enum class WaitKind : int32_t {
  kSemaphore = 1,  // a semaphore wait: expected a count, saw a smaller one
  kPacket = 2,     // an LL packet read: expected a flag
  kFifoFull = 3,   // a port channel push: the proxy did not free a FIFO slot
  kFifoSync = 4,   // a port channel flush: the proxy did not finish the triggers
  // Not waits: a counted call's entries that cannot run (the call stops, as a timeout stops it).
  kEntryMismatch = 5,  // a send's bytes (seen) differ from the receive entry's (expected)
  kEntryOutside = 6,   // an entry ends (seen) past the end of its buffer (expected)
  // Not a timeout: the wait's peer is gone (its process closed its bootstrap connection), so it ended early.
  kPeerGone = 7,
};

// Ranks whose departure a record can hold (DiagnosticRecord::departed): more than any plan the JIT makes.
inline constexpr int32_t kMaxDepartedRanks = 256;

// Whether a record's kind is a fault of the call's entries rather than a wait that ran out of time.
LOOM_HOST_DEVICE constexpr bool entryFault(int32_t kind) {
  return kind == int32_t(WaitKind::kEntryMismatch) || kind == int32_t(WaitKind::kEntryOutside);
}

struct DiagnosticRecord {
  int32_t state;  // 0: empty; 1: being written; 2: complete
  int32_t kind;   // WaitKind
  int32_t rank;
  int32_t block;
  int32_t thread;
  int32_t op;       // the plan op the executor was running, -1 outside the executor
  int32_t channel;  // the channel's index, -1 when unknown
  int32_t peer;
  uint64_t expected;
  uint64_t seen;
  uint64_t elapsedNs;
  int32_t abortRequested;  // set by the host (Communicator::abort): host-thread waits give up
  // Set by the host: ranks (bit r % 64 of word r / 64) whose process is gone; a host-thread wait on such a
  // peer ends at once, recording kPeerGone, rather than at its timeout.
  uint64_t departed[kMaxDepartedRanks / 64];
};

// Whether `record` says rank `peer` is gone (host-thread waits only read it).
LOOM_HOST_DEVICE bool peerDeparted(DiagnosticRecord* record, int32_t peer) {
  if (record == nullptr || peer < 0 || peer >= kMaxDepartedRanks) return false;
  return (loadAcquire(&record->departed[peer / 64]) >> (peer % 64)) & 1;
}

// Carried by every device handle that waits: where to report, who we are, how long to wait.
struct WaitContext {
  DiagnosticRecord* record = nullptr;  // mapped host memory; nullptr: trap without a record
  int64_t timeoutNs = 0;               // 0: wait forever
  int32_t rank = -1;
  int32_t channel = -1;
  int32_t peer = -1;
};

#if !LOOM_DEVICE_PASS
// The plan thread block the calling host thread runs (set by the CPU backend), for timeout records.
inline thread_local int32_t hostThreadBlock = -1;
#endif

LOOM_HOST_DEVICE uint64_t nowNs() {
#if LOOM_DEVICE_PASS
  uint64_t time;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(time));
  return time;
#else
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
#endif
}

// Records the timeout and stops: a trap on the GPU (the kernel ends with an error the host then
// explains from the record); an exception on a host thread (the CPU backend).
LOOM_HOST_DEVICE void reportTimeout(const WaitContext& context, WaitKind kind, int32_t op, uint64_t expected,
                                    uint64_t seen, uint64_t elapsedNs) {
  DiagnosticRecord* record = context.record;
  if (record != nullptr && AtomicRef<int32_t>(record->state).fetch_add(1, kRelaxed) == 0) {
    record->kind = int32_t(kind);
    record->rank = context.rank;
#if LOOM_DEVICE_PASS
    record->block = int32_t(blockIdx.x);
    record->thread = int32_t(threadIdx.x);
#else
    record->block = hostThreadBlock;
    record->thread = 0;
#endif
    record->op = op;
    record->channel = context.channel;
    record->peer = context.peer;
    record->expected = expected;
    record->seen = seen;
    record->elapsedNs = elapsedNs;
    fenceSystem();
    storeRelease(&record->state, int32_t(2));
  }
#if LOOM_DEVICE_PASS
  __trap();
#else
  const char* what = entryFault(int32_t(kind))     ? "loom: bad call entry"
                     : kind == WaitKind::kPeerGone ? "loom: the peer waited on is gone"
                                                   : "loom: wait timed out";
  throw std::runtime_error(std::string(what) + " (kind " + std::to_string(int(kind)) + ", expected " +
                           std::to_string(expected) + ", seen " + std::to_string(seen) + ")");
#endif
}

// Spins until `ready(seen)` holds for the value `poll()` returns. The clock is read only every 4096
// polls, and first then, so a wait that is satisfied soon never pays for a timer read. `expected`
// only goes into the record.
template <typename Poll, typename Ready>
LOOM_HOST_DEVICE uint64_t spinUntil(const WaitContext& context, WaitKind kind, int32_t op, uint64_t expected, Poll poll,
                                    Ready ready) {
  uint64_t start = 0;
  for (uint32_t spins = 1;; ++spins) {
    const uint64_t seen = poll();
    if (ready(seen)) return seen;
#if !LOOM_DEVICE_PASS
    // Host threads (the CPU backend) may outnumber the cores: let the one we wait for run.
    if ((spins & 63) == 0) std::this_thread::yield();
    // An abort ends the waits of the CPU backend; a GPU kernel is left to its own timeout. So does the
    // departure of the peer waited on, once it is seen (one more look first: it may have delivered before it
    // went).
    if ((spins & 4095) == 0 && context.record != nullptr) {
      if (loadAcquire(&context.record->abortRequested) != 0) throw std::runtime_error("loom: wait aborted");
      if (peerDeparted(context.record, context.peer)) {
        const uint64_t last = poll();
        if (ready(last)) return last;
        reportTimeout(context, WaitKind::kPeerGone, op, expected, last, 0);
      }
    }
#endif
    if (context.timeoutNs > 0 && (spins & 4095) == 0) {
      const uint64_t now = nowNs();
      if (start == 0) {
        start = now;
      } else if (now - start > uint64_t(context.timeoutNs)) {
        reportTimeout(context, kind, op, expected, seen, now - start);
      }
    }
  }
}

}  // namespace loom::device
