#pragma once

// Device memory that peers can map: cudaMalloc memory (shared through legacy CUDA IPC handles) or a
// cuMem allocation created with the POSIX file-descriptor handle type (shared by passing the
// descriptor over a Unix socket). Owned: freed when the buffer goes.

#include <cstdint>

namespace loom {

enum class GpuAllocator : uint8_t { kCudaMalloc, kCuMem };

class GpuBuffer {
 public:
  GpuBuffer() = default;
  // On the current device; the bytes are zeroed. A CUDA error when there is no device.
  explicit GpuBuffer(uint64_t bytes, GpuAllocator allocator = GpuAllocator::kCudaMalloc);
  ~GpuBuffer();
  GpuBuffer(GpuBuffer&& other) noexcept;
  GpuBuffer& operator=(GpuBuffer&& other) noexcept;
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;

  void* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  int device() const { return device_; }
  GpuAllocator allocator() const { return allocator_; }

 private:
  void release();
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t reservedBytes_ = 0;  // cuMem: the size rounded up to the allocation granularity
  int device_ = -1;
  GpuAllocator allocator_ = GpuAllocator::kCudaMalloc;
};

}  // namespace loom
