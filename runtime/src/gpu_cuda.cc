// The GPU facade over the CUDA runtime and driver.

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "cuda_check.hpp"
#include "cuda_driver.hpp"
#include "gpu.hpp"

namespace loom::gpu {

bool compiledWithCuda() { return true; }

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

int currentDevice() {
  if (deviceCount() == 0) return -1;
  int device = -1;
  checkCuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

void setDevice(int device) { checkCuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")"); }

std::string pciBusId(int device) {
  char id[32] = {};
  checkCuda(cudaDeviceGetPCIBusId(id, sizeof(id), device), "cudaDeviceGetPCIBusId");
  std::string text(id);
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string deviceName(int device) {
  cudaDeviceProp properties{};
  checkCuda(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  return std::string(properties.name);
}

PointerInfo pointerInfo(const void* pointer) {
  PointerInfo info;
  if (deviceCount() == 0) return info;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    (void)cudaGetLastError();
    return info;
  }
  if (attributes.type != cudaMemoryTypeDevice) return info;  // host, pinned host, managed: host-side transports
  info.location = MemoryLocation::kDevice;
  info.device = attributes.device;
  const CudaDriver& driver = cudaDriver();
  CUdeviceptr base = 0;
  size_t size = 0;
  checkDriver(driver.memGetAddressRange(&base, &size, reinterpret_cast<CUdeviceptr>(pointer)), "cuMemGetAddressRange");
  info.allocationBase = base;
  info.allocationBytes = size;
  // cudaMalloc memory is legacy-IPC capable; asking it for a cuMem handle would fail (which
  // compute-sanitizer reports as an API error), so only other memory is asked.
  int legacyIpc = 0;
  const CUresult asked = driver.pointerGetAttribute(&legacyIpc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                                    reinterpret_cast<CUdeviceptr>(pointer));
  CUmemGenericAllocationHandle handle{};
  if ((asked != CUDA_SUCCESS || !legacyIpc) &&
      driver.memRetainAllocationHandle(&handle, const_cast<void*>(pointer)) == CUDA_SUCCESS) {
    info.fromCuMem = true;
    driver.memRelease(handle);
  }
  return info;
}

uint64_t allocationId(const void* pointer) {
  if (deviceCount() == 0) return 0;
  unsigned long long id = 0;
  if (cudaDriver().pointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, reinterpret_cast<CUdeviceptr>(pointer)) !=
      CUDA_SUCCESS) {
    return 0;  // host memory CUDA never saw
  }
  return id;
}

void allowAccessFromCurrentDevice(int ownerDevice, bool fromCuMem, uint64_t allocationBase, uint64_t allocationBytes) {
  const int device = currentDevice();
  if (device < 0 || device == ownerDevice) return;
  const std::string between = "GPU " + std::to_string(device) + " and GPU " + std::to_string(ownerDevice);
  int canAccess = 0;
  checkCuda(cudaDeviceCanAccessPeer(&canAccess, device, ownerDevice), "cudaDeviceCanAccessPeer");
  if (!canAccess) {
    throw Error(ErrorCategory::kCuda, "ranks of one process on " + between +
                                          ": the GPUs have no peer access to each other's memory, which Loom's "
                                          "memory channels need");
  }
  if (fromCuMem) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    checkDriver(cudaDriver().memSetAccess(allocationBase, allocationBytes, &access, 1),
                "cuMemSetAccess for " + between);
    return;
  }
  const cudaError_t status = cudaDeviceEnablePeerAccess(ownerDevice, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // enabled before, by Loom or by the application: what is needed
    return;
  }
  checkCuda(status, "cudaDeviceEnablePeerAccess between " + between);
}

namespace {

// The process's copy stream on the current device, one per device, shared by every thread. Non-blocking:
// a copy on the legacy default stream (plain cudaMemcpy) would wait for every kernel of the device,
// including the one waiting for this very copy (a kernel that flushes a port channel whose proxy stages
// through the host). Never destroyed: the thread-local ones this replaces were destroyed at thread exit,
// which for the main thread is process exit, when the CUDA context may be gone already (nccl-tests
// died there with SIGSEGV in cuStreamDestroy).
cudaStream_t copyStream() {
  static std::mutex mutex;
  static std::map<int, cudaStream_t>& streams = *new std::map<int, cudaStream_t>();
  int device = 0;
  checkCuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  cudaStream_t& stream = streams[device];
  if (stream == nullptr) checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return stream;
}

}  // namespace

void copy(void* dst, const void* src, uint64_t bytes) {
  if (deviceCount() == 0) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cudaStream_t stream = copyStream();
  const std::string what = "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes";
  checkCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), what);
  checkCuda(cudaStreamSynchronize(stream), what);
}

PinnedHostBuffer::PinnedHostBuffer(uint64_t bytes, bool mapped) : bytes_(bytes) {
  if (deviceCount() == 0) {
    if (mapped) throw Error(ErrorCategory::kCuda, "mapped host memory: no CUDA device is visible");
    data_ = std::calloc(1, bytes ? bytes : 1);
    if (data_ == nullptr) throw Error(ErrorCategory::kSystem, "out of host memory");
    return;
  }
  pinned_ = true;
  const unsigned flags = cudaHostAllocPortable | (mapped ? cudaHostAllocMapped : 0);
  checkCuda(cudaHostAlloc(&data_, bytes ? bytes : 1, flags), "cudaHostAlloc of " + std::to_string(bytes) + " bytes");
  std::memset(data_, 0, bytes);
  if (mapped) checkCuda(cudaHostGetDevicePointer(&deviceData_, data_, 0), "cudaHostGetDevicePointer");
}
PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_ == nullptr) return;
  if (pinned_) {
    cudaFreeHost(data_);
  } else {
    std::free(data_);
  }
}
PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      deviceData_(std::exchange(other.deviceData_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      pinned_(other.pinned_) {}
PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(deviceData_, other.deviceData_);
  std::swap(bytes_, other.bytes_);
  std::swap(pinned_, other.pinned_);
  return *this;
}

std::array<uint8_t, 64> exportLegacyIpcHandle(void* allocationBase) {
  static_assert(sizeof(cudaIpcMemHandle_t) == 64);
  cudaIpcMemHandle_t handle{};
  checkCuda(cudaIpcGetMemHandle(&handle, allocationBase), "cudaIpcGetMemHandle");
  std::array<uint8_t, 64> bytes{};
  std::memcpy(bytes.data(), &handle, bytes.size());
  return bytes;
}

std::shared_ptr<void> openLegacyIpcHandle(const std::array<uint8_t, 64>& bytes, void** pointer) {
  // A process may open a legacy handle only once (a second open of the same allocation fails), and
  // the executor maps one peer allocation for many buffers in it: share one mapping per handle.
  static std::mutex mutex;
  static std::map<std::array<uint8_t, 64>, std::weak_ptr<void>> open;
  std::lock_guard<std::mutex> lock(mutex);
  std::erase_if(open, [](const auto& entry) { return entry.second.expired(); });
  if (std::shared_ptr<void> mapping = open[bytes].lock()) {
    *pointer = mapping.get();
    return mapping;
  }
  cudaIpcMemHandle_t handle{};
  std::memcpy(&handle, bytes.data(), bytes.size());
  checkCuda(cudaIpcOpenMemHandle(pointer, handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  std::shared_ptr<void> mapping(*pointer, [](void* mapped) { cudaIpcCloseMemHandle(mapped); });
  open[bytes] = mapping;
  return mapping;
}

int exportPosixFd(void* allocationBase) {
  const CudaDriver& driver = cudaDriver();
  CUmemGenericAllocationHandle handle{};
  checkDriver(driver.memRetainAllocationHandle(&handle, allocationBase), "cuMemRetainAllocationHandle");
  int fd = -1;
  CUresult status = driver.memExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  driver.memRelease(handle);
  checkDriver(status,
              "cuMemExportToShareableHandle (was the cuMem allocation created with the POSIX file-descriptor "
              "handle type?)");
  return fd;
}

int exportDmabuf(const void* data, uint64_t bytes, uint64_t* offset) {
  const PointerInfo info = pointerInfo(data);
  if (info.location != MemoryLocation::kDevice) return -1;
  const CudaDriver& driver = cudaDriver();
  int supported = 0;
  if (driver.deviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, info.device) != CUDA_SUCCESS ||
      !supported) {
    return -1;
  }
  // The range must start and end on host pages.
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  const uint64_t address = reinterpret_cast<uint64_t>(data);
  const uint64_t begin = address / page * page;
  const uint64_t end = (address + bytes + page - 1) / page * page;
  int fd = -1;
  if (driver.memGetHandleForAddressRange(&fd, begin, end - begin, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) !=
      CUDA_SUCCESS) {
    return -1;
  }
  *offset = address - begin;
  return fd;
}

std::shared_ptr<void> importPosixFd(int fd, uint64_t allocationBytes, int device, void** pointer) {
  const CudaDriver& driver = cudaDriver();
  CUmemGenericAllocationHandle handle{};
  checkDriver(driver.memImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              "cuMemImportFromShareableHandle");
  CUdeviceptr address = 0;
  CUresult status = driver.memAddressReserve(&address, allocationBytes, 0, 0, 0);
  if (status == CUDA_SUCCESS) {
    status = driver.memMap(address, allocationBytes, 0, handle, 0);
    if (status != CUDA_SUCCESS) driver.memAddressFree(address, allocationBytes);
  }
  driver.memRelease(handle);  // the mapping keeps the memory alive from here on
  checkDriver(status, "mapping an imported cuMem allocation of " + std::to_string(allocationBytes) + " bytes");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  status = driver.memSetAccess(address, allocationBytes, &access, 1);
  auto unmap = [allocationBytes](void* mapped) {
    const CudaDriver& d = cudaDriver();
    d.memUnmap(reinterpret_cast<CUdeviceptr>(mapped), allocationBytes);
    d.memAddressFree(reinterpret_cast<CUdeviceptr>(mapped), allocationBytes);
  };
  std::shared_ptr<void> owner(reinterpret_cast<void*>(address), unmap);
  checkDriver(status, "cuMemSetAccess on an imported allocation for device " + std::to_string(device));
  *pointer = reinterpret_cast<void*>(address);
  return owner;
}

Stream::Stream(int device) : device_(device) {
  setDevice(device);
  cudaStream_t stream = nullptr;
  checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = stream;
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void Stream::copyAsync(void* dst, const void* src, uint64_t bytes) {
  checkCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream_)),
            "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes on device " + std::to_string(device_));
}

void Stream::writeValueAsync(uint64_t* address, uint64_t value) {
  // The default flags order the store after every earlier copy of the stream, memory barrier
  // included: a peer that sees the value sees the data.
  checkDriver(cudaDriver().streamWriteValue64(static_cast<CUstream>(stream_), reinterpret_cast<CUdeviceptr>(address),
                                              value, CU_STREAM_WRITE_VALUE_DEFAULT),
              "cuStreamWriteValue64");
}

bool Stream::idle() {
  cudaError_t status = cudaStreamQuery(static_cast<cudaStream_t>(stream_));
  if (status == cudaErrorNotReady) return false;
  checkCuda(status, "work on the transport stream of device " + std::to_string(device_));
  return true;
}

}  // namespace loom::gpu

namespace loom::gpu {

namespace {

// Zeroes new memory before anyone can see it. Not plain cudaMemset: that runs on the legacy stream,
// asynchronously, so a copy on a non-blocking stream (a program upload) could land before the zeros,
// and it would also wait behind a kernel that waits for a peer.
void zeroDevice(void* data, uint64_t bytes) {
  checkCuda(cudaMemsetAsync(data, 0, bytes, copyStream()), "cudaMemsetAsync");
  checkCuda(cudaStreamSynchronize(copyStream()), "cudaStreamSynchronize (zeroing new memory)");
}

}  // namespace

void* allocateDevice(uint64_t bytes, bool cuMem, uint64_t* reservedBytes) {
  const int device = currentDevice();
  if (device < 0) throw Error(ErrorCategory::kCuda, "device memory: no CUDA device is visible");
  if (!cuMem) {
    void* data = nullptr;
    checkCuda(cudaMalloc(&data, bytes ? bytes : 1), "cudaMalloc of " + std::to_string(bytes) + " bytes");
    *reservedBytes = bytes;
    zeroDevice(data, bytes);
    return data;
  }
  const CudaDriver& driver = cudaDriver();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  checkDriver(driver.memGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
              "cuMemGetAllocationGranularity");
  const uint64_t rounded = ((bytes ? bytes : 1) + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle{};
  checkDriver(driver.memCreate(&handle, rounded, &prop, 0), "cuMemCreate of " + std::to_string(rounded) + " bytes");
  CUdeviceptr address = 0;
  CUresult status = driver.memAddressReserve(&address, rounded, granularity, 0, 0);
  if (status == CUDA_SUCCESS) {
    status = driver.memMap(address, rounded, 0, handle, 0);
    if (status != CUDA_SUCCESS) driver.memAddressFree(address, rounded);
  }
  driver.memRelease(handle);
  checkDriver(status, "mapping a cuMem allocation of " + std::to_string(rounded) + " bytes");
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  status = driver.memSetAccess(address, rounded, &access, 1);
  if (status != CUDA_SUCCESS) {
    driver.memUnmap(address, rounded);
    driver.memAddressFree(address, rounded);
    checkDriver(status, "cuMemSetAccess");
  }
  *reservedBytes = rounded;
  void* data = reinterpret_cast<void*>(address);
  zeroDevice(data, rounded);
  return data;
}

void freeDevice(void* data, bool cuMem, uint64_t reservedBytes) {
  if (!cuMem) {
    cudaFree(data);
    return;
  }
  const CudaDriver& driver = cudaDriver();
  driver.memUnmap(reinterpret_cast<CUdeviceptr>(data), reservedBytes);
  driver.memAddressFree(reinterpret_cast<CUdeviceptr>(data), reservedBytes);
}

}  // namespace loom::gpu
