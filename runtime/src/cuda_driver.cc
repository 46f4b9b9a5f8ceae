#include "cuda_driver.hpp"

#include <cuda_runtime.h>

#include <string>

#include "cuda_check.hpp"

namespace loom {
namespace {

// The ABI version each entry point is asked for: the CUDA 12.0 forms (the _v2 variants of the
// address-range and stream-memory functions).
constexpr unsigned kEntryPointVersion = 12000;

template <typename Fn>
void resolve(Fn& fn, const char* symbol) {
  void* pointer = nullptr;
  cudaDriverEntryPointQueryResult result{};
  cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &pointer, kEntryPointVersion, cudaEnableDefault, &result);
  if (status != cudaSuccess || result != cudaDriverEntryPointSuccess || pointer == nullptr) {
    (void)cudaGetLastError();
    throw Error(ErrorCategory::kCuda, std::string("the CUDA driver lacks ") + symbol + " (" +
                                          cudaGetErrorString(status) + "); is the driver older than CUDA 12?");
  }
  fn = reinterpret_cast<Fn>(pointer);
}

CudaDriver load() {
  CudaDriver driver;
  resolve(driver.getErrorName, "cuGetErrorName");
  resolve(driver.memGetAddressRange, "cuMemGetAddressRange");
  resolve(driver.memRetainAllocationHandle, "cuMemRetainAllocationHandle");
  resolve(driver.memRelease, "cuMemRelease");
  resolve(driver.memExportToShareableHandle, "cuMemExportToShareableHandle");
  resolve(driver.memImportFromShareableHandle, "cuMemImportFromShareableHandle");
  resolve(driver.memGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle");
  resolve(driver.memGetAllocationGranularity, "cuMemGetAllocationGranularity");
  resolve(driver.memAddressReserve, "cuMemAddressReserve");
  resolve(driver.memAddressFree, "cuMemAddressFree");
  resolve(driver.memCreate, "cuMemCreate");
  resolve(driver.memMap, "cuMemMap");
  resolve(driver.memUnmap, "cuMemUnmap");
  resolve(driver.memSetAccess, "cuMemSetAccess");
  resolve(driver.streamWriteValue64, "cuStreamWriteValue64");
  return driver;
}

}  // namespace

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
