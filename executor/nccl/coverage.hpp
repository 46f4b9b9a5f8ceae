#pragma once

// What Loom serves in a job: per communicator, the calls and bytes of each collective by who ran them
// (a Loom plan, a local copy, nothing, the real NCCL) and why. Counted per call on the hot path (one
// relaxed increment of a fixed table); reported at ncclCommDestroy/ncclCommAbort and at process exit,
// in the log at INFO and, with LOOM_NCCL_STATS=FILE, as JSON (docs/nccl.md, "What Loom serves").

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dispatch.hpp"

namespace loom::nccl {

class CommunicatorCoverage {
 public:
  static constexpr size_t kCalls = 10;    // Call's values
  static constexpr size_t kRoutes = 5;    // Route's values
  static constexpr size_t kReasons = 32;  // room above Reason's values
  static_assert(size_t(Call::kRecv) + 1 == kCalls && size_t(Route::kFail) + 1 == kRoutes &&
                    size_t(Reason::kJitFailed) < kReasons,
                "the coverage table has a cell for every call, route and reason of dispatch.hpp");

  struct Identity {
    uint32_t serial = 0;
    std::string origin;
    int rank = 0;
    int worldSize = 0;
    int cudaDevice = -1;
  };

  // Registered with the process's report, which keeps it after its communicator is gone.
  static std::shared_ptr<CommunicatorCoverage> create(Identity identity, std::string statsFile);

  // `bytes`: this rank's send buffer (NCCL's count times the type's size; times the ranks for
  // ReduceScatter and AlltoAll).
  void count(Call call, Route route, Reason reason, uint64_t bytes) {
    Cell& cell = (*cells_)[size_t(call)][size_t(route)][size_t(reason)];
    cell.calls.fetch_add(1, std::memory_order_relaxed);
    cell.bytes.fetch_add(bytes, std::memory_order_relaxed);
  }

  // Kernels Loom launched for the communicator's calls (CPU backend: runs of the interpreter), a send/recv
  // group's calls with several peers counting one.
  void countLaunches(uint64_t launches) { launches_.fetch_add(launches, std::memory_order_relaxed); }

  // The communicator ends: its table goes to the log (INFO) and the JSON file is rewritten. No call is
  // counted after it (NCCL forbids using a communicator being destroyed).
  void close();

 private:
  friend struct CoverageReport;
  explicit CommunicatorCoverage(Identity identity) : identity_(std::move(identity)) {}

  struct Cell {
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> bytes{0};
  };
  using Table = std::array<std::array<std::array<Cell, kReasons>, kRoutes>, kCalls>;
  struct Row {
    Call call;
    Route route;
    Reason reason;
    uint64_t calls, bytes;
  };
  Identity identity_;
  // Guarded by the report's mutex. Once closed, the table (25 KiB) gives way to its non-empty rows, so
  // that a process making and destroying many communicators keeps a few bytes of each.
  bool closed_ = false;
  std::unique_ptr<Table> cells_ = std::make_unique<Table>();
  std::atomic<uint64_t> launches_{0};
  std::vector<Row> rows_;
};

}  // namespace loom::nccl
