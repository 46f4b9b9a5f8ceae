#pragma once

// CUDA driver entry points, fetched through the runtime at first use (cudaGetDriverEntryPoint), so
// Loom links no libcuda and a host without a driver still loads it.

#include <cuda.h>

namespace loom {

struct CudaDriver {
  decltype(&::cuGetErrorName) getErrorName = nullptr;
  decltype(&::cuMemGetAddressRange) memGetAddressRange = nullptr;
  decltype(&::cuPointerGetAttribute) pointerGetAttribute = nullptr;
  decltype(&::cuMemRetainAllocationHandle) memRetainAllocationHandle = nullptr;
  decltype(&::cuMemRelease) memRelease = nullptr;
  decltype(&::cuMemExportToShareableHandle) memExportToShareableHandle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) memImportFromShareableHandle = nullptr;
  decltype(&::cuMemGetAllocationPropertiesFromHandle) memGetAllocationPropertiesFromHandle = nullptr;
  decltype(&::cuMemGetAllocationGranularity) memGetAllocationGranularity = nullptr;
  decltype(&::cuMemAddressReserve) memAddressReserve = nullptr;
  decltype(&::cuMemAddressFree) memAddressFree = nullptr;
  decltype(&::cuMemCreate) memCreate = nullptr;
  decltype(&::cuMemMap) memMap = nullptr;
  decltype(&::cuMemUnmap) memUnmap = nullptr;
  decltype(&::cuMemSetAccess) memSetAccess = nullptr;
  decltype(&::cuStreamWriteValue64) streamWriteValue64 = nullptr;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute = nullptr;
  decltype(&::cuMemGetHandleForAddressRange) memGetHandleForAddressRange = nullptr;
};

// Throws a CUDA error naming the entry point that is missing.
const CudaDriver& cudaDriver();

// Looks one driver entry point up (its CUDA 12.0 ABI form); a CUDA error names it when it is missing.
void* driverEntryPoint(const char* symbol);
template <typename Fn>
void resolveDriverEntryPoint(Fn& fn, const char* symbol) {
  fn = reinterpret_cast<Fn>(driverEntryPoint(symbol));
}

}  // namespace loom
