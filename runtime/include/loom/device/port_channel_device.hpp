#pragma once

// The device handle of a port channel: the GPU asks its proxy thread to move data (put), update the
// peer's semaphore (signal) and wait for completion (flush) by pushing triggers into the FIFO; it
// waits for the peer's signals on a host-signalled semaphore. One thread of a block calls these.

#include <cstdint>

#include "loom/device/fifo_device.hpp"
#include "loom/device/macros.hpp"
#include "loom/device/semaphore_device.hpp"

namespace loom::device {

struct PortChannelHandle {
  FifoHandle fifo;
  HostSemaphoreHandle semaphore;
  uint32_t semaphoreId;  // the proxy's index of this channel's semaphore (and so its connection)
  uint32_t dstMemory;    // the proxy's index of the peer's memory
  uint32_t srcMemory;    // the proxy's index of this rank's memory

  LOOM_HOST_DEVICE uint64_t push(uint64_t flags, uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes, int32_t op) {
    return fifo.push(dstOffset, srcOffset, bytes, ProxyTrigger::makeMeta(flags, semaphoreId, dstMemory, srcMemory), op);
  }
  LOOM_HOST_DEVICE void put(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes, int32_t op = -1) {
    push(kTriggerData, dstOffset, srcOffset, bytes, op);
  }
  LOOM_HOST_DEVICE void signal(int32_t op = -1) { push(kTriggerSignal, 0, 0, 0, op); }
  LOOM_HOST_DEVICE void putWithSignal(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes, int32_t op = -1) {
    push(kTriggerData | kTriggerSignal, dstOffset, srcOffset, bytes, op);
  }
  LOOM_HOST_DEVICE void putWithSignalAndFlush(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes, int32_t op = -1) {
    fifo.sync(push(kTriggerData | kTriggerSignal | kTriggerFlush, dstOffset, srcOffset, bytes, op), op);
  }
  LOOM_HOST_DEVICE void flush(int32_t op = -1) { fifo.sync(push(kTriggerFlush, 0, 0, 0, op), op); }
  // Waits until the proxy no longer reads this rank's memory for what was pushed before.
  LOOM_HOST_DEVICE void finishReads(int32_t op = -1) { fifo.sync(push(0, 0, 0, 0, op), op); }
  LOOM_HOST_DEVICE void wait(int32_t op = -1) { semaphore.waitSignal(op); }
};

}  // namespace loom::device
