#pragma once

// Low-latency (LL) packets: data and a flag written in one store, so a receiver that sees the flag
// sees the data without a separate signal. The flag is a per-call value (it changes every call),
// so stale packets from the previous call never match and the buffer is never cleared.
//
// Why the flag proves the data is there: an aligned 8-byte store is single-copy atomic on the GPU
// (and over NVLink), so a reader never sees half of one. LL8 packs 4 data bytes with a 4-byte flag
// in one 8-byte word. LL16 carries 8 data bytes as two such halves {data1, flag}, {data2, flag}
// written by one 16-byte store; the store is not promised to be atomic as a whole, so the reader
// checks both flags. docs/runtime.md has the full argument.

#include <cstdint>

#include "loom/device/atomics.hpp"
#include "loom/device/diagnostics.hpp"
#include "loom/device/macros.hpp"

namespace loom::device {

struct alignas(16) LL16Packet {
  uint32_t data1;
  uint32_t flag1;
  uint32_t data2;
  uint32_t flag2;

  static constexpr uint32_t kDataBytes = 8;

  LOOM_HOST_DEVICE void write(uint32_t value1, uint32_t value2, uint32_t flag) {
#if LOOM_DEVICE_PASS
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(this), "r"(value1), "r"(flag), "r"(value2),
                 "r"(flag)
                 : "memory");
#else
    auto* halves = reinterpret_cast<uint64_t*>(this);
    storeRelaxed(&halves[0], uint64_t(flag) << 32 | value1);
    storeRelaxed(&halves[1], uint64_t(flag) << 32 | value2);
#endif
  }
  LOOM_HOST_DEVICE void write(uint64_t value, uint32_t flag) { write(uint32_t(value), uint32_t(value >> 32), flag); }

  // One look: the data, and the flags of both halves as (flag1 << 32 | flag2).
  LOOM_HOST_DEVICE uint64_t look(uint64_t& value) const {
    uint32_t d1, f1, d2, f2;
#if LOOM_DEVICE_PASS
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(d1), "=r"(f1), "=r"(d2), "=r"(f2)
                 : "l"(this)
                 : "memory");
#else
    auto* halves = reinterpret_cast<uint64_t*>(const_cast<LL16Packet*>(this));
    const uint64_t low = loadRelaxed(&halves[0]), high = loadRelaxed(&halves[1]);
    d1 = uint32_t(low), f1 = uint32_t(low >> 32), d2 = uint32_t(high), f2 = uint32_t(high >> 32);
#endif
    value = uint64_t(d2) << 32 | d1;
    return uint64_t(f1) << 32 | f2;
  }
  // One look: true and the data when both halves carry `flag`.
  LOOM_HOST_DEVICE bool tryRead(uint32_t flag, uint64_t& value) const { return look(value) == bothFlags(flag); }

  // A timed-out read reports the flags it last saw.
  LOOM_HOST_DEVICE uint64_t read(uint32_t flag, const WaitContext& context, int32_t op = -1) const {
    uint64_t value = 0;
    if (tryRead(flag, value)) return value;
    const void* self = this;
    spinUntil(
        context, WaitKind::kPacket, op, flag, [&] { return look(value); },
        [&](uint64_t flags) { return flags == bothFlags(flag); }, &self);
    return value;
  }

  LOOM_HOST_DEVICE static uint64_t bothFlags(uint32_t flag) { return uint64_t(flag) << 32 | flag; }
};

struct alignas(8) LL8Packet {
  uint32_t data;
  uint32_t flag;

  static constexpr uint32_t kDataBytes = 4;

  LOOM_HOST_DEVICE void write(uint32_t value, uint32_t flagValue) {
    const uint64_t word = uint64_t(flagValue) << 32 | value;
#if LOOM_DEVICE_PASS
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(this), "l"(word) : "memory");
#else
    storeRelaxed(reinterpret_cast<uint64_t*>(this), word);
#endif
  }
  // One look: the data, and the flag (as both halves of the word a timed-out read reports).
  LOOM_HOST_DEVICE uint64_t look(uint32_t& value) const {
    uint64_t word;
#if LOOM_DEVICE_PASS
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(word) : "l"(this) : "memory");
#else
    word = loadRelaxed(reinterpret_cast<uint64_t*>(const_cast<LL8Packet*>(this)));
#endif
    value = uint32_t(word);
    return LL16Packet::bothFlags(uint32_t(word >> 32));
  }
  LOOM_HOST_DEVICE bool tryRead(uint32_t flagValue, uint32_t& value) const {
    return look(value) == LL16Packet::bothFlags(flagValue);
  }
  LOOM_HOST_DEVICE uint32_t read(uint32_t flagValue, const WaitContext& context, int32_t op = -1) const {
    uint32_t value = 0;
    if (tryRead(flagValue, value)) return value;
    const void* self = this;
    spinUntil(
        context, WaitKind::kPacket, op, flagValue, [&] { return look(value); },
        [&](uint64_t flags) { return flags == LL16Packet::bothFlags(flagValue); }, &self);
    return value;
  }
};

// Bytes of packet buffer that `dataBytes` of payload need (a partial last packet counts whole).
template <typename Packet>
LOOM_HOST_DEVICE uint64_t packetBufferBytes(uint64_t dataBytes) {
  return (dataBytes + Packet::kDataBytes - 1) / Packet::kDataBytes * sizeof(Packet);
}

// Reads up to one packet's payload from `src` (which may end mid-packet) as a little-endian word.
LOOM_HOST_DEVICE uint64_t loadPartial(const uint8_t* src, uint64_t bytes) {
  uint64_t value = 0;
  for (uint64_t i = 0; i < bytes; ++i) value |= uint64_t(src[i]) << (8 * i);
  return value;
}
LOOM_HOST_DEVICE void storePartial(uint8_t* dst, uint64_t value, uint64_t bytes) {
  for (uint64_t i = 0; i < bytes; ++i) dst[i] = uint8_t(value >> (8 * i));
}

// Packs `bytes` of `src` into LL16 packets at `dst`, spread over `threads` threads. `src` is 8-byte
// aligned; a last partial packet carries the remaining bytes, zero-padded.
LOOM_HOST_DEVICE void putPackets(LL16Packet* dst, const void* src, uint64_t bytes, uint32_t flag, uint32_t thread,
                                 uint32_t threads) {
  const uint64_t whole = bytes / 8;
  const auto* words = static_cast<const uint64_t*>(src);
  for (uint64_t i = thread; i < whole; i += threads) dst[i].write(words[i], flag);
  if (bytes % 8 != 0 && thread == (whole % threads)) {
    dst[whole].write(loadPartial(static_cast<const uint8_t*>(src) + whole * 8, bytes % 8), flag);
  }
}

// Waits for the LL16 packets at `src` to carry `flag` and writes their payload to `dst`.
LOOM_HOST_DEVICE void unpackPackets(void* dst, const LL16Packet* src, uint64_t bytes, uint32_t flag, uint32_t thread,
                                    uint32_t threads, const WaitContext& context, int32_t op = -1) {
  const uint64_t whole = bytes / 8;
  auto* words = static_cast<uint64_t*>(dst);
  for (uint64_t i = thread; i < whole; i += threads) words[i] = src[i].read(flag, context, op);
  if (bytes % 8 != 0 && thread == (whole % threads)) {
    storePartial(static_cast<uint8_t*>(dst) + whole * 8, src[whole].read(flag, context, op), bytes % 8);
  }
}

}  // namespace loom::device
