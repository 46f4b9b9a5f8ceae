#pragma once

// The device handle of a memory channel: this rank's GPU threads load and store the peer's memory
// directly (mapped through CUDA IPC), and synchronise through a memory semaphore. Offsets are in
// bytes; every data method is called by all `threads` threads of a group with their own `thread`.

#include <cstdint>

#include "loom/device/copy.hpp"
#include "loom/device/macros.hpp"
#include "loom/device/packet.hpp"
#include "loom/device/semaphore_device.hpp"

namespace loom::device {

struct MemoryChannelHandle {
  MemorySemaphoreHandle semaphore;
  void* dst;           // the peer's buffer, mapped here
  void* src;           // this rank's buffer
  void* packetBuffer;  // this rank's buffer where the peer's packets land (nullptr if none)

  // src + srcOffset -> peer's dst + dstOffset.
  LOOM_HOST_DEVICE void put(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes, uint32_t thread, uint32_t threads) {
    copyBytes(static_cast<uint8_t*>(dst) + dstOffset, static_cast<const uint8_t*>(src) + srcOffset, bytes, thread,
              threads);
  }
  // Peer's dst + dstOffset -> src + srcOffset (a remote read).
  LOOM_HOST_DEVICE void get(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes, uint32_t thread, uint32_t threads) {
    copyBytes(static_cast<uint8_t*>(src) + srcOffset, static_cast<const uint8_t*>(dst) + dstOffset, bytes, thread,
              threads);
  }
  template <typename T>
  LOOM_HOST_DEVICE T read(uint64_t index) const {
    return static_cast<const T*>(dst)[index];
  }
  template <typename T>
  LOOM_HOST_DEVICE void write(uint64_t index, const T& value) {
    static_cast<T*>(dst)[index] = value;
  }

  // src + srcOffset -> LL16 packets at the peer's dst + dstOffset (a packet buffer there).
  LOOM_HOST_DEVICE void putPackets(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes, uint32_t thread,
                                   uint32_t threads, uint32_t flag) {
    device::putPackets(reinterpret_cast<LL16Packet*>(static_cast<uint8_t*>(dst) + dstOffset),
                       static_cast<const uint8_t*>(src) + srcOffset, bytes, flag, thread, threads);
  }
  // Packets the peer put at packetBuffer + packetOffset -> src + srcOffset, waiting for `flag`.
  LOOM_HOST_DEVICE void unpackPackets(uint64_t srcOffset, uint64_t packetOffset, uint64_t bytes, uint32_t thread,
                                      uint32_t threads, uint32_t flag, int32_t op = -1) {
    device::unpackPackets(static_cast<uint8_t*>(src) + srcOffset,
                          reinterpret_cast<const LL16Packet*>(static_cast<uint8_t*>(packetBuffer) + packetOffset),
                          bytes, flag, thread, threads, semaphore.waitContext, op);
  }

  // Packets the peer wrote into its own buffer (dst + packetOffset), read over the link into src +
  // srcOffset, waiting for `flag`: the pull form, for a peer that stages packets locally.
  LOOM_HOST_DEVICE void getPackets(uint64_t srcOffset, uint64_t packetOffset, uint64_t bytes, uint32_t thread,
                                   uint32_t threads, uint32_t flag, int32_t op = -1) {
    device::unpackPackets(static_cast<uint8_t*>(src) + srcOffset,
                          reinterpret_cast<const LL16Packet*>(static_cast<uint8_t*>(dst) + packetOffset), bytes, flag,
                          thread, threads, semaphore.waitContext, op);
  }

  LOOM_HOST_DEVICE void signal() { semaphore.signal(); }
  LOOM_HOST_DEVICE void relaxedSignal() { semaphore.relaxedSignal(); }
  LOOM_HOST_DEVICE void wait(int32_t op = -1) { semaphore.wait(op); }
  LOOM_HOST_DEVICE void relaxedWait(int32_t op = -1) { semaphore.relaxedWait(op); }
};

}  // namespace loom::device
