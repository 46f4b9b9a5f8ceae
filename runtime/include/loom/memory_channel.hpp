#pragma once

// A memory channel from this rank to a peer on the same host: the GPU's own threads copy into (or
// read from) the peer's registered memory, mapped here through CUDA IPC, and synchronise through a
// memory semaphore. It is the lowest-latency channel and the one LL packets travel on.

#include "loom/device/memory_channel_device.hpp"
#include "loom/registered_memory.hpp"
#include "loom/semaphore.hpp"

namespace loom {

class MemoryChannel {
 public:
  // `dst`: the peer's memory (from recvMemory, mapped here); `src`: this rank's; `packetBuffer`:
  // this rank's memory where the peer's packets land (optional). `channel` labels timeout reports.
  MemoryChannel(std::shared_ptr<MemorySemaphore> semaphore, RegisteredMemory dst, RegisteredMemory src,
                RegisteredMemory packetBuffer = {}, int channel = -1);

  device::MemoryChannelHandle deviceHandle() const;
  int peer() const { return semaphore_->peer(); }

 private:
  std::shared_ptr<MemorySemaphore> semaphore_;
  RegisteredMemory dst_, src_, packetBuffer_;
  int channel_;
};

}  // namespace loom
