// The GPU facade in a build without CUDA: host memory only.

#include <cstdlib>
#include <cstring>
#include <utility>

#include "gpu.hpp"
#include "loom/error.hpp"

namespace loom::gpu {
namespace {

[[noreturn]] void noCuda(const char* what) {
  throw Error(ErrorCategory::kCuda, std::string(what) + ": this build of Loom has no CUDA (nvcc was not found)");
}

}  // namespace

bool compiledWithCuda() { return false; }
int deviceCount() { return 0; }
int currentDevice() { return -1; }
void setDevice(int) { noCuda("setDevice"); }
std::string pciBusId(int) { noCuda("pciBusId"); }
std::string deviceName(int) { noCuda("deviceName"); }
PointerInfo pointerInfo(const void*) { return {}; }
uint64_t allocationId(const void*) { return 0; }
void copy(void* dst, const void* src, uint64_t bytes) { std::memcpy(dst, src, bytes); }

PinnedHostBuffer::PinnedHostBuffer(uint64_t bytes, bool mapped) : bytes_(bytes) {
  if (mapped) noCuda("mapped host memory");
  data_ = std::calloc(1, bytes ? bytes : 1);
  if (data_ == nullptr) throw Error(ErrorCategory::kSystem, "out of host memory (" + std::to_string(bytes) + " bytes)");
}
PinnedHostBuffer::~PinnedHostBuffer() { std::free(data_); }
PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), pinned_(other.pinned_) {}
PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

void allowAccessFromCurrentDevice(int, bool, uint64_t, uint64_t) { noCuda("peer access"); }
std::array<uint8_t, 64> exportLegacyIpcHandle(void*) { noCuda("CUDA IPC"); }
std::shared_ptr<void> openLegacyIpcHandle(const std::array<uint8_t, 64>&, void**) { noCuda("CUDA IPC"); }
int exportPosixFd(void*) { noCuda("CUDA IPC"); }
int exportDmabuf(const void*, uint64_t, uint64_t*) { return -1; }
std::shared_ptr<void> importPosixFd(int, uint64_t, int, void**) { noCuda("CUDA IPC"); }

Stream::Stream(int device) : device_(device) { noCuda("a CUDA stream"); }
Stream::~Stream() = default;
void Stream::copyAsync(void*, const void*, uint64_t) { noCuda("a CUDA stream"); }
void Stream::writeValueAsync(uint64_t*, uint64_t) { noCuda("a CUDA stream"); }
bool Stream::idle() { return true; }

void* allocateDevice(uint64_t, bool, uint64_t*) { noCuda("device memory"); }
void freeDevice(void*, bool, uint64_t) {}

}  // namespace loom::gpu
