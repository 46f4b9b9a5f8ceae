#pragma once

// Every CUDA runtime and driver return code the runtime sees goes through one of these, so a
// failure is a loom::Error of category CUDA that says what was being done and CUDA's own words.

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "loom/error.hpp"

namespace loom {

inline void checkCuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // a non-sticky error must not surface again at an unrelated call
    throw Error(ErrorCategory::kCuda, what + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
  }
}

void checkDriver(CUresult status, const std::string& what);  // cuda_driver.cc

}  // namespace loom
