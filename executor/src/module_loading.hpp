#pragma once

// CUDA_MODULE_LOADING=EAGER, which the executor needs wherever a running kernel waits for something a
// first kernel launch could hold back: with lazy loading (CUDA's default since 12.2) the first launch
// of a kernel loads its module, and a load may wait for the kernels running on the GPU.

#include <string>

namespace loom {

// Throws an invalid-argument Error "<subject> CUDA_MODULE_LOADING=EAGER in the environment before CUDA
// starts (it is <setting>): <why>" unless the process environment sets it to EAGER.
void requireEagerModuleLoading(const std::string& subject, const std::string& why);

}  // namespace loom
