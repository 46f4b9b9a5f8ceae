#pragma once

// The FIFO between a GPU and its proxy thread. GPU threads push 32-byte triggers into a ring in
// mapped host memory; the proxy pops them in order, carries them out through a connection and
// advances the tail, which the GPU reads to know a slot is free again (or that a flush is done).
//
// A trigger is four 64-bit words: destination offset, source offset, bytes, and a meta word whose
// top bit says the slot is filled. The pusher writes the first three, fences, then the meta word:
// a proxy that sees the bit sees the rest. 64-bit offsets and sizes travel whole.

#include <cstdint>

#include "loom/device/atomics.hpp"
#include "loom/device/diagnostics.hpp"
#include "loom/device/macros.hpp"

namespace loom::device {

enum TriggerFlags : uint64_t {
  kTriggerData = 1,    // write `bytes` from the source memory to the destination memory
  kTriggerSignal = 2,  // then signal the semaphore
  kTriggerFlush = 4,   // then wait until everything of the connection is complete
  // No flag: wait until the connection no longer reads this rank's memory (a TCP send has taken it,
  // a copy or RDMA write has completed); what a call does before its caller may reuse its buffers.
};

struct ProxyTrigger {
  uint64_t dstOffset;
  uint64_t srcOffset;
  uint64_t bytes;
  uint64_t meta;  // valid:1 | flags:3 | semaphore:20 | dst memory:20 | src memory:20

  static constexpr uint64_t kValid = uint64_t(1) << 63;
  static constexpr uint32_t kIdBits = 20;
  static constexpr uint32_t kMaxId = (1u << kIdBits) - 1;

  LOOM_HOST_DEVICE static uint64_t makeMeta(uint64_t flags, uint32_t semaphore, uint32_t dstMemory,
                                            uint32_t srcMemory) {
    return kValid | (flags & 7) << 60 | uint64_t(semaphore & kMaxId) << 40 | uint64_t(dstMemory & kMaxId) << 20 |
           uint64_t(srcMemory & kMaxId);
  }
  LOOM_HOST_DEVICE uint64_t flags() const { return (meta >> 60) & 7; }
  LOOM_HOST_DEVICE uint32_t semaphore() const { return uint32_t(meta >> 40) & kMaxId; }
  LOOM_HOST_DEVICE uint32_t dstMemory() const { return uint32_t(meta >> 20) & kMaxId; }
  LOOM_HOST_DEVICE uint32_t srcMemory() const { return uint32_t(meta) & kMaxId; }
};

struct FifoHandle {
  ProxyTrigger* triggers;  // `size` slots in mapped host memory
  uint64_t* head;          // device memory: the next position to hand out
  uint64_t* tail;          // mapped host memory: positions below it are done (written by the proxy)
  uint64_t size;
  WaitContext waitContext;

  // Returns the trigger's position, for sync(). One thread pushes; any number of blocks may.
  LOOM_HOST_DEVICE uint64_t push(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes, uint64_t meta,
                                 int32_t op = -1) {
    const uint64_t position = fetchAddRelaxed(head, uint64_t(1));
    // Wait for the slot: the proxy frees positions in order, so tail > position - size frees it.
    if (position >= size) {
      spinUntil(
          waitContext, WaitKind::kFifoFull, op, position - size + 1, [&] { return loadAcquire(tail); },
          [&](uint64_t done) { return done + size > position; });
    }
    ProxyTrigger* slot = &triggers[position % size];
    storeRelaxed(&slot->dstOffset, dstOffset);
    storeRelaxed(&slot->srcOffset, srcOffset);
    storeRelaxed(&slot->bytes, bytes);
    // The data the trigger refers to and the trigger's body must reach the proxy before its valid bit.
    fenceSystem();
    storeRelaxed(&slot->meta, meta);
    return position;
  }

  // Waits until the proxy has carried out the trigger at `position`.
  LOOM_HOST_DEVICE void sync(uint64_t position, int32_t op = -1) {
    spinUntil(
        waitContext, WaitKind::kFifoSync, op, position + 1, [&] { return loadAcquire(tail); },
        [&](uint64_t done) { return done > position; });
  }
};

}  // namespace loom::device
