#include "loom/memory_channel.hpp"

#include "loom/error.hpp"

namespace loom {

MemoryChannel::MemoryChannel(std::shared_ptr<MemorySemaphore> semaphore, RegisteredMemory dst, RegisteredMemory src,
                             RegisteredMemory packetBuffer, int channel)
    : semaphore_(std::move(semaphore)),
      dst_(std::move(dst)),
      src_(std::move(src)),
      packetBuffer_(std::move(packetBuffer)),
      channel_(channel) {
  const std::string where = "memory channel " + std::to_string(channel);
  if (!semaphore_) throw Error(ErrorCategory::kInvalidArgument, where + ": no semaphore");
  if (!dst_.valid() || dst_.data() == nullptr) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": dst must be the peer's memory, mapped in this process");
  }
  if (dst_.ownerRank() != semaphore_->peer()) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": dst belongs to rank " + std::to_string(dst_.ownerRank()) +
                                                     " but the semaphore connects to rank " +
                                                     std::to_string(semaphore_->peer()));
  }
  if (!src_.valid() || !src_.isLocal()) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": src must be memory this process registered");
  }
  if (packetBuffer_.valid() && !packetBuffer_.isLocal()) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": packetBuffer must be memory this process registered");
  }
}

device::MemoryChannelHandle MemoryChannel::deviceHandle() const {
  device::MemoryChannelHandle handle;
  handle.semaphore = semaphore_->deviceHandle();
  handle.semaphore.waitContext.channel = channel_;
  handle.dst = dst_.data();
  handle.src = src_.data();
  handle.packetBuffer = packetBuffer_.valid() ? packetBuffer_.data() : nullptr;
  return handle;
}

}  // namespace loom
