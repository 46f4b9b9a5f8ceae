#include "symmetric_windows.hpp"

#include <utility>

namespace loom {

void SymmetricWindows::add(SymmetricWindow window) {
  nextId_ = window.id + 1;
  const uint64_t base = window.bases[rank_];
  byBase_.emplace(base, std::move(window));
}

bool SymmetricWindows::remove(uint64_t id) {
  for (auto it = byBase_.begin(); it != byBase_.end(); ++it) {
    if (it->second.id == id) {
      byBase_.erase(it);
      return true;
    }
  }
  return false;
}

const SymmetricWindow* SymmetricWindows::byId(uint64_t id) const {
  for (const auto& [base, window] : byBase_) {
    if (window.id == id) return &window;
  }
  return nullptr;
}

bool SymmetricWindows::overlaps(const void* address, uint64_t bytes) const {
  const auto at = reinterpret_cast<uint64_t>(address);
  for (const auto& [base, window] : byBase_) {
    if (base < at + bytes && at < base + window.bytes) return true;
  }
  return false;
}

std::optional<WindowPlace> SymmetricWindows::find(const void* address, uint64_t bytes) const {
  const auto at = reinterpret_cast<uint64_t>(address);
  if (bytes == 0 || byBase_.empty()) return std::nullopt;
  auto it = byBase_.upper_bound(at);  // the first window above `at`; the one before may hold it
  if (it == byBase_.begin()) return std::nullopt;
  --it;
  const SymmetricWindow& window = it->second;
  const uint64_t offset = at - it->first;
  if (offset >= window.bytes || bytes > window.bytes - offset) return std::nullopt;
  return WindowPlace{&window, offset};
}

std::vector<RankBuffers> windowedBuffers(const WindowPlace& input, const WindowPlace& output) {
  std::vector<RankBuffers> everyRank(input.window->bases.size());
  for (size_t r = 0; r < everyRank.size(); ++r) {
    RankBuffers& buffers = everyRank[r];
    buffers.input = input.window->bases[r] + input.offset;
    buffers.output = output.window->bases[r] + output.offset;
    buffers.inputAllocation = input.window->allocations[r];
    buffers.outputAllocation = output.window->allocations[r];
    buffers.inputBytes = input.window->bytes - input.offset;
    buffers.outputBytes = output.window->bytes - output.offset;
    buffers.inputWindow = input.window->id;
    buffers.outputWindow = output.window->id;
  }
  return everyRank;
}

}  // namespace loom
