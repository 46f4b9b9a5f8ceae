#include "memory_table.hpp"

#include <map>
#include <mutex>

namespace loom {

struct MemoryTable::State {
  mutable std::mutex mutex;
  uint64_t nextId = 1;
  std::map<uint64_t, LocalMemory> entries;
};

MemoryTable& MemoryTable::process() {
  // Never destroyed: registrations released during static destruction still find it.
  static MemoryTable* table = [] {
    auto* created = new MemoryTable();
    created->state_ = std::make_shared<State>();
    return created;
  }();
  return *table;
}

std::pair<uint64_t, std::shared_ptr<void>> MemoryTable::add(const LocalMemory& memory) {
  std::lock_guard lock(state_->mutex);
  const uint64_t id = state_->nextId++;
  state_->entries[id] = memory;
  std::weak_ptr<State> weak = state_;
  std::shared_ptr<void> token(nullptr, [weak, id](void*) {
    if (auto state = weak.lock()) {
      std::lock_guard lock(state->mutex);
      state->entries.erase(id);
    }
  });
  return {id, token};
}

std::optional<LocalMemory> MemoryTable::find(uint64_t id) const {
  std::lock_guard lock(state_->mutex);
  auto it = state_->entries.find(id);
  if (it == state_->entries.end()) return std::nullopt;
  return it->second;
}

}  // namespace loom

namespace loom {

size_t MemoryTable::size() const {
  std::lock_guard lock(state_->mutex);
  return state_->entries.size();
}

}  // namespace loom
