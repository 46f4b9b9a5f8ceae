#include "loom/fifo.hpp"

#include "gpu.hpp"
#include "loom/device/atomics.hpp"
#include "loom/error.hpp"
#include "loom/gpu_buffer.hpp"

namespace loom {

struct Fifo::Storage {
  gpu::PinnedHostBuffer triggers;
  gpu::PinnedHostBuffer tail;
  GpuBuffer deviceHead;        // with a GPU: pushers are its threads
  gpu::PinnedHostBuffer head;  // without: host threads push

  static void* deviceView(const gpu::PinnedHostBuffer& buffer) {
    return buffer.deviceData() ? buffer.deviceData() : buffer.data();
  }
};

Fifo::Fifo(uint64_t size, bool onDevice) : storage_(std::make_unique<Storage>()), size_(size) {
  if (size == 0 || size > (uint64_t(1) << 20)) {
    throw Error(ErrorCategory::kInvalidArgument, "FIFO size: expected 1 to 1048576 slots, got " + std::to_string(size));
  }
  const bool gpu = onDevice && gpu::deviceCount() > 0 && gpu::currentDevice() >= 0;
  storage_->triggers = gpu::PinnedHostBuffer(size * sizeof(device::ProxyTrigger), gpu);
  storage_->tail = gpu::PinnedHostBuffer(sizeof(uint64_t), gpu);
  if (gpu) {
    storage_->deviceHead = GpuBuffer(sizeof(uint64_t));
  } else {
    storage_->head = gpu::PinnedHostBuffer(sizeof(uint64_t), false);
  }
}

Fifo::~Fifo() = default;

device::FifoHandle Fifo::deviceHandle(const device::WaitContext& wait) const {
  device::FifoHandle handle;
  handle.triggers = static_cast<device::ProxyTrigger*>(Storage::deviceView(storage_->triggers));
  handle.head =
      static_cast<uint64_t*>(storage_->deviceHead.data() ? storage_->deviceHead.data() : storage_->head.data());
  handle.tail = static_cast<uint64_t*>(Storage::deviceView(storage_->tail));
  handle.size = size_;
  handle.waitContext = wait;
  return handle;
}

std::optional<device::ProxyTrigger> Fifo::poll() const {
  auto* slot = static_cast<device::ProxyTrigger*>(storage_->triggers.data()) + tail_ % size_;
  // The pusher fenced before setting the valid bit: acquiring it makes the other words current.
  const uint64_t meta = device::loadAcquire(&slot->meta);
  if ((meta & device::ProxyTrigger::kValid) == 0) return std::nullopt;
  device::ProxyTrigger trigger;
  trigger.dstOffset = device::loadRelaxed(&slot->dstOffset);
  trigger.srcOffset = device::loadRelaxed(&slot->srcOffset);
  trigger.bytes = device::loadRelaxed(&slot->bytes);
  trigger.meta = meta;
  return trigger;
}

void Fifo::pop() {
  auto* slot = static_cast<device::ProxyTrigger*>(storage_->triggers.data()) + tail_ % size_;
  device::storeRelaxed(&slot->meta, uint64_t(0));
  // Released after the slot is cleared, so a pusher that sees the new tail finds the slot empty.
  device::storeRelease(static_cast<uint64_t*>(storage_->tail.data()), ++tail_);
}

}  // namespace loom
