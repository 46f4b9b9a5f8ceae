#pragma once

// Copies spread over the threads of a block, at any byte alignment of either end. On a GPU every
// 16 bytes of the destination are stored as one vector, several loads in flight before the first
// store (which is what keeps NVLink busy): after a head of single bytes that aligns the destination,
// a source equally misaligned is read in vectors too, and one misaligned differently is read as the
// two aligned vectors around each 16 bytes it gives (all-to-all-v entries start at any offset). The
// tail goes byte by byte. On the host (the CPU backend) each thread copies one contiguous range.

#include <cstdint>
#include <cstring>

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

// Bytes [shift, shift + 16) of the 32 bytes `low` then `high` (little-endian), shift in 1..15: the
// same shift for every thread of a copy, so the branches do not diverge.
LOOM_HOST_DEVICE Vec16 bytesAcross(const Vec16& low, const Vec16& high, uint32_t shift) {
  if (shift == 8) return Vec16{low.y, high.x};
  if (shift < 8) {
    const uint32_t bits = 8 * shift;
    return Vec16{(low.x >> bits) | (low.y << (64 - bits)), (low.y >> bits) | (high.x << (64 - bits))};
  }
  const uint32_t bits = 8 * (shift - 8);
  return Vec16{(low.y >> bits) | (high.x << (64 - bits)), (high.x >> bits) | (high.y << (64 - bits))};
}

// Whole 16-byte vectors into a 16-byte aligned `dst` from a `src` that is not 16-byte aligned; returns
// the bytes copied. Each vector is cut out of the two aligned source vectors it straddles. Both hold
// bytes of the source, so no load leaves the 16-byte blocks the source touches (no page it does not
// touch; on the host a sanitizer would still see bytes outside the source read).
template <int kUnroll>
LOOM_HOST_DEVICE uint64_t copyAcross(void* dst, const void* src, uint64_t bytes, uint32_t thread, uint32_t threads) {
  const uint32_t shift = uint32_t(reinterpret_cast<uintptr_t>(src) % 16);
  const auto* blocks = reinterpret_cast<const Vec16*>(static_cast<const uint8_t*>(src) - shift);
  auto* out = static_cast<Vec16*>(dst);
  const uint64_t vectors = bytes / 16;
  const uint64_t stride = uint64_t(threads) * kUnroll;
  uint64_t i = thread;
  for (; i + uint64_t(threads) * (kUnroll - 1) < vectors; i += stride) {
    Vec16 low[kUnroll], high[kUnroll];
    LOOM_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      low[u] = blocks[i + uint64_t(u) * threads];
      high[u] = blocks[i + uint64_t(u) * threads + 1];
    }
    LOOM_UNROLL
    for (int u = 0; u < kUnroll; ++u) out[i + uint64_t(u) * threads] = bytesAcross(low[u], high[u], shift);
  }
  for (; i < vectors; i += threads) out[i] = bytesAcross(blocks[i], blocks[i + 1], shift);
  return vectors * 16;
}

// The GPU's copy: a head of single bytes up to the destination's next 16-byte boundary, then whole
// vectors (read straight where the source is aligned there too, else across), then the tail.
LOOM_HOST_DEVICE void copyVectorised(void* dst, const void* src, uint64_t bytes, uint32_t thread, uint32_t threads) {
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  uint64_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
  if (head > bytes) head = bytes;
  for (uint64_t i = thread; i < head; i += threads) out[i] = in[i];
  uint64_t done = head;
  if (bytes > head) {
    if (reinterpret_cast<uintptr_t>(in + head) % 16 == 0) {
      done += copyWords<Vec16, 4>(out + head, in + head, bytes - head, thread, threads);
    } else {
      // Two vectors per step, not four: each holds two loads, and four spilled in the 64 registers of the
      // 1024-thread interpreter (nvcc 13, sm_90: fp32 sum 156 / 348 B spill stores / loads against 36 / 100).
      done += copyAcross<2>(out + head, in + head, bytes - head, thread, threads);
    }
  }
  for (uint64_t i = done + thread; i < bytes; i += threads) out[i] = in[i];
}

LOOM_HOST_DEVICE void copyBytes(void* dst, const void* src, uint64_t bytes, uint32_t thread, uint32_t threads) {
#ifdef __CUDA_ARCH__
  copyVectorised(dst, src, bytes, thread, threads);
#else
  // The CPU backend: one contiguous range per thread (memcpy reads nothing outside the source).
  const uint64_t share = (bytes + threads - 1) / threads;
  const uint64_t begin = share * thread < bytes ? share * thread : bytes;
  const uint64_t end = begin + share < bytes ? begin + share : bytes;
  if (end > begin)
    std::memcpy(static_cast<uint8_t*>(dst) + begin, static_cast<const uint8_t*>(src) + begin, end - begin);
#endif
}

}  // namespace loom::device
