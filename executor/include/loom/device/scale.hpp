#pragma once

// Multiplying every element of a buffer by one factor: how NCCL's average is run (a sum, then each
// element of the result times 1/n). One function for the GPU's grid-stride loop and the CPU backend.

#include <cstdint>

#include "loom/device/macros.hpp"
#include "loom/device/numeric.hpp"

namespace loom::device {

// Elements first, first + stride, ... below count. Narrow types are widened to float, scaled, and
// rounded once.
template <typename T>
LOOM_HOST_DEVICE void scaleElements(T* data, uint64_t count, float factor, uint64_t first, uint64_t stride) {
  for (uint64_t i = first; i < count; i += stride) {
    data[i] = Numeric<T>::fromAcc(Numeric<T>::toAcc(data[i]) * factor);
  }
}

}  // namespace loom::device
