#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace loom {

// A point in time that a blocking step must finish by, remembering the budget it was given so that
// timeout messages can say "within 30000 ms".
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Deadline(int64_t timeoutMs)
      : timeoutMs_(timeoutMs), end_(Clock::now() + std::chrono::milliseconds(timeoutMs)) {}

  int64_t timeoutMs() const { return timeoutMs_; }
  bool expired() const { return Clock::now() >= end_; }
  Clock::time_point end() const { return end_; }

  // Milliseconds left, rounded up so that poll() never wakes a hair early and spins, at most `cap`.
  int remainingMs(int64_t cap = INT32_MAX) const {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(end_ - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, cap));
  }

  // The earlier of this deadline and `timeoutMs` from now (for best-effort steps inside a longer one).
  Deadline capped(int64_t timeoutMs) const {
    Deadline other(timeoutMs);
    return other.end_ < end_ ? other : *this;
  }

 private:
  int64_t timeoutMs_;
  Clock::time_point end_;
};

}  // namespace loom
