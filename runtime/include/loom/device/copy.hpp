#pragma once

// Copies spread over the threads of a block: 16-byte vector loads and stores when both ends are
// 16-byte aligned (several loads in flight before the first store, which is what keeps NVLink
// busy), narrower words otherwise, single bytes for the tail.

#include <cstdint>

#include "loom/device/macros.hpp"

namespace loom::device {

struct alignas(16) Vec16 {
  uint64_t x, y;
};

template <typename Word, int kUnroll>
LOOM_HOST_DEVICE uint64_t copyWords(void* dst, const void* src, uint64_t bytes, uint32_t thread, uint32_t threads) {
  auto* out = static_cast<Word*>(dst);
  const auto* in = static_cast<const Word*>(src);
  const uint64_t words = bytes / sizeof(Word);
  const uint64_t stride = uint64_t(threads) * kUnroll;
  uint64_t i = thread;
  for (; i + uint64_t(threads) * (kUnroll - 1) < words; i += stride) {
    Word staged[kUnroll];
LOOM_UNROLL
    for (int u = 0; u < kUnroll; ++u) staged[u] = in[i + uint64_t(u) * threads];
LOOM_UNROLL
    for (int u = 0; u < kUnroll; ++u) out[i + uint64_t(u) * threads] = staged[u];
  }
  for (; i < words; i += threads) out[i] = in[i];
  return words * sizeof(Word);
}

LOOM_HOST_DEVICE void copyBytes(void* dst, const void* src, uint64_t bytes, uint32_t thread, uint32_t threads) {
  const uint64_t alignment = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  uint64_t done = 0;
  if (alignment % 16 == 0) {
    done = copyWords<Vec16, 4>(dst, src, bytes, thread, threads);
  } else if (alignment % 4 == 0) {
    done = copyWords<uint32_t, 4>(dst, src, bytes, thread, threads);
  }
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  for (uint64_t i = done + thread; i < bytes; i += threads) out[i] = in[i];
}

}  // namespace loom::device
