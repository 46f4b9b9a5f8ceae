#pragma once

// Runs plans for one rank. Per plan (keyed by its content, not its name) the executor builds once
// what the plan needs through the runtime: connections, semaphores, channels, scratch, per-block
// call counters. Per message size and buffer pair it resolves the plan into a flat device program
// and exchanges buffer registrations with the peers, once, and caches the result. A call then is
// one kernel launch on the caller's stream, with no host synchronisation: also under CUDA graph
// capture, whose replays advance the per-call LL flags on the device.
//
// Every rank calls execute with the same plan and message size, collectively. A call with new
// buffers or a new size is a setup step all ranks take together (it exchanges registrations).
// After a call fails because a peer timed out or went away, every later call throws: the ranks no
// longer agree on where they are, and the communicator must be aborted and created anew.
// With a host-only communicator (Communicator::kHostOnly) the same program runs on host threads:
// the CPU backend, used by the tests and on machines without GPUs.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "loom/communicator.hpp"
#include "loom/data_type.hpp"
#include "loom/error.hpp"
#include "loom/plan.hpp"
#include "loom/plan_registry.hpp"

namespace loom {

struct ExecutorStats {
  uint64_t plansBuilt = 0;     // plan setups (connections, semaphores, scratch)
  uint64_t contextsBuilt = 0;  // resolutions with buffer exchange
  uint64_t launches = 0;
  uint64_t specializedTransfers = 0;  // data ops of the contexts built that run specialised (fast path)
  uint64_t genericTransfers = 0;      // and generically
  uint64_t inlinedContexts = 0;       // contexts whose program travels in the inline kernel's parameters
  uint64_t proxyMemories = 0;         // memories the port channels' proxy holds now: those of the cached contexts (of
                                      // every executor sharing it)
  uint64_t proxySharers = 0;          // executors sharing this rank's proxy: 1, or more with splits on its GPU
  uint64_t freedBufferContextsDropped = 0;  // contexts dropped because a rank had freed a buffer they use
  uint64_t bufferExchanges = 0;  // calls of plans bound to user buffers that exchanged where every rank's are
  uint64_t windowCalls = 0;      // and calls that found them in symmetric windows instead (no exchange once set up)
  uint64_t groupedCalls = 0;     // counted calls launched together with other executors' (executeCountedGroup)
};

// Bytes of one rank's output for a call whose input is `messageBytes` (n x for all-gather, 1/n for
// reduce-scatter, the same otherwise).
uint64_t planOutputBytes(const Plan& plan, uint64_t messageBytes);

// One message of a counted call: `bytes` at `offset` of the rank's input (a send) or output (a receive).
struct MessageEntry {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// The buffers and per-peer messages of a counted call (an alltoallv plan: per-peer sizes come with the
// call; docs/executor.md, "counted plans"). `sends[p]` is what this rank sends to rank p, `receives[q]`
// what it receives from rank q, one entry per rank each (zero bytes where nothing moves); a send's bytes
// must equal its receive's. Or, with `deviceEntries` set, the kernel reads 2 x world size MessageEntry
// records (sends, then receives) from there when it runs: memory of the rank's device that the caller
// keeps, and may change between CUDA graph replays; the sizes of the buffers bound every entry then.
struct CountedCall {
  const void* input = nullptr;
  uint64_t inputBytes = 0;  // the whole buffer each entry lies in (a null buffer of 0 bytes is allowed)
  void* output = nullptr;
  uint64_t outputBytes = 0;
  std::vector<MessageEntry> sends;
  std::vector<MessageEntry> receives;
  const MessageEntry* deviceEntries = nullptr;
};

class Executor;

// One call of Executor::executeCountedGroup.
struct GroupedCountedCall {
  Executor* executor = nullptr;
  const Plan* plan = nullptr;
  CountedCall call;
};

class Executor {
 public:
  // With `shareProxyOf` (the executor of the communicator this one was split from, on the same GPU),
  // both use one proxy for their port channels; an executor on another GPU gets its own.
  explicit Executor(std::shared_ptr<Communicator> communicator, const Executor* shareProxyOf = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // One collective call. `messageBytes`: bytes of this rank's input (docs/plan-format.md); the
  // output is as large as the collective makes it. `op` must be the operator the plan's
  // reductions name (the plan's reduce op is honoured, never replaced). `stream`: a cudaStream_t
  // (nullptr: the legacy default stream) on a GPU; nullptr for the CPU backend.
  void execute(const Plan& plan, const void* input, void* output, uint64_t messageBytes, DataType type, ReduceOp op,
               void* stream = nullptr);

  // One counted call (collective `alltoallv`), collectively: every rank calls with the same plan; bytes
  // go straight into each receiver's output. Errors name the argument and entry; a send whose bytes differ
  // from what its receiver posted stops the call with an error naming both ranks and both sizes.
  void executeCounted(const Plan& plan, const CountedCall& call, void* stream = nullptr);

  // Counted calls of two-rank plans on different executors of this rank (the NCCL library's links: one per
  // peer of a send/recv group), set up in the order given and run as one launch on `stream`: on the GPU one
  // kernel of every call's blocks; on the CPU backend the calls run side by side. Each is collective over its
  // own two ranks, as executeCounted is. At most 16 calls, whose plans have one number of threads per block,
  // entries given on the host. Every rank orders its calls alike (by the pair's ranks, say), so that setups
  // never wait in a cycle. A failure leaves every executor of the group refusing later calls.
  static void executeCountedGroup(std::span<const GroupedCountedCall> calls, void* stream = nullptr);

  // Collective: registers this rank's `bytes` at `base` as a symmetric window (like ncclCommWindowRegister with
  // NCCL_WIN_COLL_SYMMETRIC): every rank registers a window of the same bytes at the same call, and uses it at
  // the same offsets. A call whose input and output lie in windows then exchanges nothing: after the first
  // call of a plan on those windows (where the ranks check the offsets), a peer's buffer is its window's base
  // plus this rank's offset. Returns the window's handle, the same on every rank. Refused on every rank when
  // any rank's window is null, empty, overlaps one it registered, spans two allocations, or differs in size.
  uint64_t registerWindow(void* base, uint64_t bytes);
  // Collective: waits for every rank's calls, drops the contexts set up on the window, and forgets it.
  void deregisterWindow(uint64_t window);

  // A copy between this rank's own buffers: how NCCL runs every collective of a job of one rank, and
  // a send to itself. Nothing to move when `input` is `output`, else `bytes` copied on `stream`
  // (enqueued on a GPU, also under graph capture; at once on the CPU backend).
  void copyLocal(const void* input, void* output, uint64_t bytes, void* stream = nullptr);

  // Multiplies the `bytes / size(type)` elements at `data`, this rank's buffer of a floating type, by
  // `factor` on `stream` (enqueued on a GPU, also under graph capture; at once on the CPU backend): how
  // NCCL's average runs, a sum plan and then a scale by 1/n. An integer type is an InvalidArgument error.
  void scale(void* data, uint64_t bytes, DataType type, float factor, void* stream = nullptr);

  // Like ncclCommAbort: stops a call in flight on another thread (CPU backend: its host waits throw
  // within about 100 ms; bootstrap waits too) and frees what the plans hold, without waiting for
  // peers, which may be dead. Waits up to `waitMs` for the call in flight to return; false when it
  // did not (the resources are then freed with the executor). Every later call throws.
  bool abort(int64_t waitMs = 5000);

  // What makes this communicator unusable, without waiting for a call in flight (ncclCommGetAsyncError, a
  // watchdog thread): an earlier call's failure, else the ranks whose process is gone (they closed their
  // bootstrap connection to this rank without saying goodbye, as a destroyed communicator's bootstrap does:
  // only ranks this rank has talked to are seen). nullopt: none known.
  std::optional<Error> asyncError() const;

  Communicator& communicator() const;
  bool onGpu() const;
  // Whether a CUDA graph is being captured on `stream` (always false on the CPU backend).
  bool capturing(void* stream) const;
  // Where this rank's plans run, for selection (plan_registry.hpp): the ranks sharing its GPU and the
  // interpreter blocks of 1024 threads the GPU holds at once (smaller blocks fit no better: at most one
  // runs per multiprocessor). No limit on the CPU backend, unless LOOM_CPU_RESIDENT_BLOCKS=N stands in for
  // a GPU that holds N blocks, shared by the ranks of this process on this host (to test the fit rule).
  Placement placement() const;
  // The machine as a tuned table names it (tuned_table.hpp): the table `loom tune` writes for this
  // communicator's shape, and the one its executor loads.
  TunedMachine tunedMachine() const;
  ExecutorStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
