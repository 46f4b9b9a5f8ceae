#pragma once

// Symmetric windows: memory every rank registers together, at the same call, and then uses at the same
// offsets (NCCL's ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC, loom.Communicator.register). A call
// whose input and output lie in windows needs no per-call exchange of where the peers' buffers are: a
// peer's buffer is its window's base plus this rank's offset. The executor checks the offsets where the
// ranks meet anyway (the first call of a plan on a pair of windows); between those calls the offsets are
// the caller's promise, as they are NCCL's.

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "call_agreement.hpp"

namespace loom {

// One window: each rank's base address and the allocation behind it (0: one the backend cannot name),
// and its bytes (the same on every rank).
struct SymmetricWindow {
  uint64_t id = 0;  // 1, 2, ... in registration order: the same on every rank
  std::vector<uint64_t> bases;
  std::vector<uint64_t> allocations;
  uint64_t bytes = 0;
};

// Where a buffer lies: its window and its offset there.
struct WindowPlace {
  const SymmetricWindow* window = nullptr;
  uint64_t offset = 0;
};

class SymmetricWindows {
 public:
  explicit SymmetricWindows(int rank) : rank_(size_t(rank)) {}
  // The next window's id (every rank registers in the same order).
  uint64_t nextId() const { return nextId_; }
  void add(SymmetricWindow window);
  // Removes it; false when there is no such window.
  bool remove(uint64_t id);
  bool empty() const { return byBase_.empty(); }
  const SymmetricWindow* byId(uint64_t id) const;
  // Whether any of this rank's windows holds a byte of the `bytes` at `address`.
  bool overlaps(const void* address, uint64_t bytes) const;
  // The window of this rank that holds all `bytes` at `address` (at least one byte), if any.
  std::optional<WindowPlace> find(const void* address, uint64_t bytes) const;

 private:
  size_t rank_;
  uint64_t nextId_ = 1;
  std::map<uint64_t, SymmetricWindow> byBase_;  // by this rank's base
};

// Every rank's buffers of a call whose input lies at `input` and output at `output` (the same offsets on
// every rank), with what is left of each window past the offset as their bytes, and the windows named.
std::vector<RankBuffers> windowedBuffers(const WindowPlace& input, const WindowPlace& output);

}  // namespace loom
