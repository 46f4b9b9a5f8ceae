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
  // Not a timeout: the host asked the communicator's waits to end (abort), so it ended early.
  kAborted = 8,
  // Not a wait: a receive entry's bytes (expected) differ from the count the sender's packets carry (seen).
  kEntrySentMismatch = 9,
};

// Whether a record's kind ends the wait without a fault of the kernel's own: a GPU kernel then returns
// rather than traps, so the CUDA context stays usable and the survivors can build a new communicator.
LOOM_HOST_DEVICE constexpr bool endsCleanly(int32_t kind) {
  return kind == int32_t(WaitKind::kPeerGone) || kind == int32_t(WaitKind::kAborted);
}

// Ranks whose departure a record can hold (DiagnosticRecord::departed): more than any plan the JIT makes.
inline constexpr int32_t kMaxDepartedRanks = 256;

// Whether a record's kind is a fault of the call's entries rather than a wait that ran out of time.
LOOM_HOST_DEVICE constexpr bool entryFault(int32_t kind) {
  return kind == int32_t(WaitKind::kEntryMismatch) || kind == int32_t(WaitKind::kEntryOutside) ||
         kind == int32_t(WaitKind::kEntrySentMismatch);
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
  // For a wait that ended early (kPeerGone, kAborted): what it waited for (a WaitKind), so that `expected` and
  // `seen` read as that wait's values (a packet's flags, a semaphore's counts); otherwise `kind` itself.
  int32_t waited;
  uint64_t expected;
  uint64_t seen;
  uint64_t elapsedNs;
  // Set by the host (Communicator::abort), or by a kernel that stopped on a departed peer: every wait ends.
  int32_t abortRequested;
  // Set by the host: ranks (bit r % 64 of word r / 64) whose process is gone; a wait on such a peer ends
  // (recording kPeerGone) rather than at its timeout.
  uint64_t departed[kMaxDepartedRanks / 64];
  // A packet read: the address of the packet that did not come (0: unknown), so that the host can name the
  // peer whose put writes it (executor/src/packet_writer.hpp).
  uint64_t address;
};

// The departed rank a wait on `peer` gives up on: `peer` once it is marked gone; for a wait that names no
// peer (packet reads and block barriers, which wait on whoever the plan says), the lowest departed rank,
// since no call of the communicator can complete without it. -1: none. Out of line, as is all of a wait's
// slow path: every wait site of every kernel instance would otherwise carry its own copy.
LOOM_HOST_DEVICE_COLD int32_t departedPeer(DiagnosticRecord* record, int32_t peer) {
  if (record == nullptr || peer >= kMaxDepartedRanks) return -1;
  if (peer >= 0) return (loadAcquire(&record->departed[peer / 64]) >> (peer % 64)) & 1 ? peer : -1;
  for (int32_t word = 0; word < kMaxDepartedRanks / 64; ++word) {
    const uint64_t bits = loadAcquire(&record->departed[word]);
    if (bits == 0) continue;
    int32_t bit = 0;
    while (((bits >> bit) & 1) == 0) ++bit;
    return word * 64 + bit;
  }
  return -1;
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

// Records the timeout and stops: on the GPU a trap (the kernel ends with an error the host then explains
// from the record), or, for a kind that endsCleanly, the end of this thread and a request that every
// other wait of the communicator end too (the kernels finish without an error; the host finds the record);
// an exception on a host thread (the CPU backend).
LOOM_HOST_DEVICE_COLD void reportTimeout(const WaitContext& context, WaitKind kind, int32_t op, uint64_t expected,
                                         uint64_t seen, uint64_t elapsedNs, WaitKind waited,
                                         const void* address = nullptr) {
  DiagnosticRecord* record = context.record;
  // The first to claim the empty record writes it; later ones leave it as it is (a count would let a second
  // claim mark the record complete while the first still writes it).
  int32_t empty = 0;
  if (record != nullptr && compareExchangeAcqRel(&record->state, empty, int32_t(1))) {
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
    record->waited = int32_t(waited);
    record->expected = expected;
    record->seen = seen;
    record->elapsedNs = elapsedNs;
    record->address = reinterpret_cast<uintptr_t>(address);
    fenceSystem();
    storeRelease(&record->state, int32_t(2));
  }
#if LOOM_DEVICE_PASS
  if (endsCleanly(int32_t(kind)) && record != nullptr) {
    storeRelease(&record->abortRequested, int32_t(1));
    // A thread that exits counts as arrived at every later block barrier (PTX barrier semantics), so the
    // rest of its block is not left waiting for it.
    asm volatile("exit;");
  }
  __trap();
#else
  const char* what = entryFault(int32_t(kind))     ? "loom: bad call entry"
                     : kind == WaitKind::kPeerGone ? "loom: the peer waited on is gone"
                     : kind == WaitKind::kAborted  ? "loom: wait aborted"
                                                   : "loom: wait timed out";
  throw std::runtime_error(std::string(what) + " (kind " + std::to_string(int(kind)) + ", expected " +
                           std::to_string(expected) + ", seen " + std::to_string(seen) + ")");
#endif
}

// A wait that ran out of time, or a fault of the call's entries: the record's kind is what was waited for.
LOOM_HOST_DEVICE_COLD void reportTimeout(const WaitContext& context, WaitKind kind, int32_t op, uint64_t expected,
                                         uint64_t seen, uint64_t elapsedNs) {
  reportTimeout(context, kind, op, expected, seen, elapsedNs, kind);
}

LOOM_HOST_DEVICE bool abortRequested(DiagnosticRecord* record) { return loadAcquire(&record->abortRequested) != 0; }

// A wait that saw the abort word: on the GPU it records kAborted and its thread exits (reportTimeout); a
// host thread records nothing and throws, since the abort's cause (a failed block, Communicator::abort)
// speaks for itself.
LOOM_HOST_DEVICE_COLD void stopOnAbort(const WaitContext& context, WaitKind waited, int32_t op, uint64_t expected,
                                       uint64_t seen) {
#if LOOM_DEVICE_PASS
  reportTimeout(context, WaitKind::kAborted, op, expected, seen, 0, waited);
#else
  (void)context, (void)waited, (void)op, (void)expected, (void)seen;
  throw std::runtime_error("loom: wait aborted");
#endif
}

// Spins until `ready(seen)` holds for the value `poll()` returns. The clock is read only every 4096
// polls, and first then, so a wait that is satisfied soon never pays for a timer read. `expected`
// only goes into the record, and so does `*missing` where given: the packet a packet read still waits
// for when it gives up (poll() may change it as other packets come).
template <typename Poll, typename Ready>
LOOM_HOST_DEVICE uint64_t spinUntil(const WaitContext& context, WaitKind kind, int32_t op, uint64_t expected, Poll poll,
                                    Ready ready, const void* const* missing = nullptr) {
  uint64_t start = 0;
  for (uint32_t spins = 1;; ++spins) {
    const uint64_t seen = poll();
    if (ready(seen)) return seen;
#if !LOOM_DEVICE_PASS
    // Host threads (the CPU backend) may outnumber the cores: let the one we wait for run.
    if ((spins & 63) == 0) std::this_thread::yield();
#endif
    // An abort ends the wait, and so does the departure of the peer waited on once the host marked it (one
    // more look first: it may have delivered before it went). Both words are in host memory: a GPU reads
    // them over PCIe, once every 4096 polls.
    if ((spins & 4095) == 0 && context.record != nullptr) {
      if (abortRequested(context.record)) stopOnAbort(context, kind, op, expected, seen);
      if (const int32_t gone = departedPeer(context.record, context.peer); gone >= 0) {
        const uint64_t last = poll();
        if (ready(last)) return last;
        WaitContext named = context;
        named.peer = gone;
        reportTimeout(named, WaitKind::kPeerGone, op, expected, last, 0, kind, missing ? *missing : nullptr);
      }
    }
    if (context.timeoutNs > 0 && (spins & 4095) == 0) {
      const uint64_t now = nowNs();
      if (start == 0) {
        start = now;
      } else if (now - start > uint64_t(context.timeoutNs)) {
        reportTimeout(context, kind, op, expected, seen, now - start, kind, missing ? *missing : nullptr);
      }
    }
  }
}

}  // namespace loom::device
