#pragma once

// The runtime's only door to CUDA. gpu_cuda.cc implements it over the CUDA runtime (and driver
// entry points fetched at run time); gpu_none.cc is the build without CUDA, where there is no
// device memory and anything that needs a GPU is an error saying so. Other runtime files call
// these functions and never include CUDA headers, so they build either way.

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "loom/registered_memory.hpp"

namespace loom::gpu {

bool compiledWithCuda();
// Devices visible to this process; 0 without CUDA, without a driver or without GPUs (never throws).
int deviceCount();
// The calling thread's current device, or -1 when there is none.
int currentDevice();
void setDevice(int device);
// "0000:1b:00.0": where the device sits on the PCI bus (for its NUMA node).
std::string pciBusId(int device);
// The device's marketing name ("NVIDIA H200"), as cudaGetDeviceProperties gives it.
std::string deviceName(int device);

struct PointerInfo {
  MemoryLocation location = MemoryLocation::kHost;
  int device = -1;
  uint64_t allocationBase = 0;  // the start and size of the allocation holding the pointer
  uint64_t allocationBytes = 0;
  bool fromCuMem = false;  // a cuMem (virtual memory management) allocation, not cudaMalloc
};
// Host memory (including memory unknown to CUDA) or device memory with its allocation.
PointerInfo pointerInfo(const void* pointer);
// The process-unique id of the CUDA allocation holding `pointer` (never reused, unlike its address);
// 0 for memory CUDA does not know.
uint64_t allocationId(const void* pointer);

// Lets kernels of the current device load and store an allocation of `ownerDevice`, another GPU of this
// process (ranks driven by one process, as ncclCommInitAll makes them): peer access for cudaMalloc
// memory, an access grant over [allocationBase, + allocationBytes) for cuMem memory (`fromCuMem`: peer
// access does not reach those). The allocation is given, not looked up: the driver finds another
// device's allocations only from that device. An error names both devices when they cannot reach each other.
void allowAccessFromCurrentDevice(int ownerDevice, bool fromCuMem, uint64_t allocationBase, uint64_t allocationBytes);

// A synchronous copy between any two pointers of this process (host or device), on the process's
// non-blocking copy stream of the current device: it never waits for kernels, so a proxy may copy
// while a kernel waits for it.
void copy(void* dst, const void* src, uint64_t bytes);

// Page-locked host memory, mapped into the device's address space when `mapped` (so kernels can
// read and write it). Zeroed. Plain host memory when there is no GPU (then `mapped` is an error).
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  PinnedHostBuffer(uint64_t bytes, bool mapped);
  ~PinnedHostBuffer();
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  void* data() const { return data_; }
  void* deviceData() const { return deviceData_; }  // the device's address of it; nullptr unless mapped
  uint64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  void* deviceData_ = nullptr;
  uint64_t bytes_ = 0;
  bool pinned_ = false;  // false: plain host memory (no GPU to pin it for)
};

// CUDA IPC. The legacy handle is 64 bytes; a cuMem allocation is exported as a file descriptor.
std::array<uint8_t, 64> exportLegacyIpcHandle(void* allocationBase);
// Maps a peer's allocation; the pointer stays valid while the returned owner lives.
std::shared_ptr<void> openLegacyIpcHandle(const std::array<uint8_t, 64>& handle, void** pointer);
int exportPosixFd(void* allocationBase);  // the caller owns the descriptor

// A dma-buf descriptor covering [data, data + bytes) of device memory, for RDMA registration
// without nvidia-peermem; `offset` receives where `data` lies in it. -1 when the device or driver
// does not support dma-buf. The caller owns the descriptor.
int exportDmabuf(const void* data, uint64_t bytes, uint64_t* offset);
std::shared_ptr<void> importPosixFd(int fd, uint64_t allocationBytes, int device, void** pointer);

// A stream of the current device and its work, used by host-driven transports.
class Stream {
 public:
  explicit Stream(int device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void copyAsync(void* dst, const void* src, uint64_t bytes);
  // Stores `value` at a device address (local or IPC-mapped) once earlier work of the stream is done.
  void writeValueAsync(uint64_t* address, uint64_t value);
  bool idle();  // all work done; a failed copy is a CUDA error
  void* raw() const { return stream_; }

 private:
  int device_;
  void* stream_ = nullptr;
};

}  // namespace loom::gpu

namespace loom::gpu {

// Device memory on the current device, zeroed. For cuMem, `reservedBytes` receives the size
// rounded up to the allocation granularity, which freeDevice needs back.
void* allocateDevice(uint64_t bytes, bool cuMem, uint64_t* reservedBytes);
void freeDevice(void* data, bool cuMem, uint64_t reservedBytes);

}  // namespace loom::gpu
