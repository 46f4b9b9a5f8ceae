#pragma once

// The registrations of this process, by id. Transports whose receiving side is a host thread (TCP,
// InfiniBand write-with-immediate) look the target of an incoming write up here: a peer names a
// registration and an offset, never a raw address, and the range is checked before any byte lands.

#include <cstdint>
#include <memory>
#include <optional>

#include "loom/registered_memory.hpp"
#include "loom/transport.hpp"

namespace loom {

struct LocalMemory {
  void* data = nullptr;
  uint64_t bytes = 0;
  MemoryLocation location = MemoryLocation::kHost;
  int deviceId = -1;
  TransportFlags transports;  // a receiving transport refuses registrations not made for it
};

class MemoryTable {
 public:
  static MemoryTable& process();

  // Adds an entry and returns its id and a token whose destruction removes it.
  std::pair<uint64_t, std::shared_ptr<void>> add(const LocalMemory& memory);
  std::optional<LocalMemory> find(uint64_t id) const;
  size_t size() const;  // live entries (leak tests)

 private:
  MemoryTable() = default;
  struct State;
  std::shared_ptr<State> state_;
  friend struct MemoryTableAccess;
};

}  // namespace loom
