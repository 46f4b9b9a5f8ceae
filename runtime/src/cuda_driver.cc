#include "cuda_driver.hpp"

#include <cuda_runtime.h>

#include <string>

#include "cuda_check.hpp"

namespace loom {
namespace {

// The ABI version each entry point is asked for: the CUDA 12.0 forms (the _v2 variants of the
// address-range and stream-memory functions).
constexpr unsigned kEntryPointVersion = 12000;

CudaDriver load() {
  CudaDriver driver;
  resolveDriverEntryPoint(driver.getErrorName, "cuGetErrorName");
  resolveDriverEntryPoint(driver.memGetAddressRange, "cuMemGetAddressRange");
  resolveDriverEntryPoint(driver.pointerGetAttribute, "cuPointerGetAttribute");
  resolveDriverEntryPoint(driver.memRetainAllocationHandle, "cuMemRetainAllocationHandle");
  resolveDriverEntryPoint(driver.memRelease, "cuMemRelease");
  resolveDriverEntryPoint(driver.memExportToShareableHandle, "cuMemExportToShareableHandle");
  resolveDriverEntryPoint(driver.memImportFromShareableHandle, "cuMemImportFromShareableHandle");
  resolveDriverEntryPoint(driver.memGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle");
  resolveDriverEntryPoint(driver.memGetAllocationGranularity, "cuMemGetAllocationGranularity");
  resolveDriverEntryPoint(driver.memAddressReserve, "cuMemAddressReserve");
  resolveDriverEntryPoint(driver.memAddressFree, "cuMemAddressFree");
  resolveDriverEntryPoint(driver.memCreate, "cuMemCreate");
  resolveDriverEntryPoint(driver.memMap, "cuMemMap");
  resolveDriverEntryPoint(driver.memUnmap, "cuMemUnmap");
  resolveDriverEntryPoint(driver.memSetAccess, "cuMemSetAccess");
  resolveDriverEntryPoint(driver.streamWriteValue64, "cuStreamWriteValue64");
  resolveDriverEntryPoint(driver.deviceGetAttribute, "cuDeviceGetAttribute");
  resolveDriverEntryPoint(driver.memGetHandleForAddressRange, "cuMemGetHandleForAddressRange");
  return driver;
}

}  // namespace

void* driverEntryPoint(const char* symbol) {
  void* pointer = nullptr;
  cudaDriverEntryPointQueryResult result{};
  cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &pointer, kEntryPointVersion, cudaEnableDefault, &result);
  if (status != cudaSuccess || result != cudaDriverEntryPointSuccess || pointer == nullptr) {
    (void)cudaGetLastError();
    throw Error(ErrorCategory::kCuda, std::string("the CUDA driver lacks ") + symbol + " (" +
                                          cudaGetErrorString(status) + "); is the driver older than CUDA 12?");
  }
  return pointer;
}

const CudaDriver& cudaDriver() {
  static const CudaDriver driver = load();
  return driver;
}

void checkDriver(CUresult status, const std::string& what) {
  if (status == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (cudaDriver().getErrorName(status, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown CUresult";
  throw Error(ErrorCategory::kCuda, what + ": " + name + " (" + std::to_string(int(status)) + ")");
}

}  // namespace loom
