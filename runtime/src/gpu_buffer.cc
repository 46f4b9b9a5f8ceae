#include "loom/gpu_buffer.hpp"

#include <utility>

#include "gpu.hpp"

namespace loom {

GpuBuffer::GpuBuffer(uint64_t bytes, GpuAllocator allocator)
    : bytes_(bytes), device_(gpu::currentDevice()), allocator_(allocator) {
  data_ = gpu::allocateDevice(bytes, allocator == GpuAllocator::kCuMem, &reservedBytes_);
}

GpuBuffer::~GpuBuffer() { release(); }

void GpuBuffer::release() {
  if (data_ != nullptr) gpu::freeDevice(data_, allocator_ == GpuAllocator::kCuMem, reservedBytes_);
  data_ = nullptr;
}

GpuBuffer::GpuBuffer(GpuBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(other.bytes_),
      reservedBytes_(other.reservedBytes_),
      device_(other.device_),
      allocator_(other.allocator_) {}

GpuBuffer& GpuBuffer::operator=(GpuBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = other.bytes_;
    reservedBytes_ = other.reservedBytes_;
    device_ = other.device_;
    allocator_ = other.allocator_;
  }
  return *this;
}

}  // namespace loom
