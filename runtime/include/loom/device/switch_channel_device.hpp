#pragma once

// The device handle of a switch channel (NVLink SHARP): one multicast address that names the same
// buffer on every GPU of the group. A multimem load-reduce through it returns the reduction over all
// GPUs' copies; a multimem store writes every copy at once. Hopper (sm_90) and newer only.

#include <cstdint>

#include "loom/device/macros.hpp"

namespace loom::device {

enum class SwitchReduce : int { kSum, kMin, kMax };

struct SwitchChannelHandle {
  void* multicast;  // the group's multicast mapping of the buffer
  void* local;      // this GPU's own copy (unicast mapping)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Reduces 16-byte vectors of floats over the group: dst (this GPU's memory) = op over every copy
  // at `offset`. Every thread of the group handles its share.
  template <SwitchReduce kOp>
  __device__ void reduceFloat(float4* dst, uint64_t offset, uint64_t vectors, uint32_t thread, uint32_t threads) {
    const auto* base = reinterpret_cast<const float4*>(static_cast<const char*>(multicast) + offset);
    for (uint64_t i = thread; i < vectors; i += threads) {
      float4 v;
      if constexpr (kOp == SwitchReduce::kSum) {
        asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {%0,%1,%2,%3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "l"(base + i)
                     : "memory");
      } else if constexpr (kOp == SwitchReduce::kMin) {
        asm volatile("multimem.ld_reduce.relaxed.sys.global.min.v4.f32 {%0,%1,%2,%3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "l"(base + i)
                     : "memory");
      } else {
        asm volatile("multimem.ld_reduce.relaxed.sys.global.max.v4.f32 {%0,%1,%2,%3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "l"(base + i)
                     : "memory");
      }
      dst[i] = v;
    }
  }
  // Writes 16-byte vectors from `src` to every GPU's copy at `offset`.
  __device__ void broadcast(const uint4* src, uint64_t offset, uint64_t vectors, uint32_t thread, uint32_t threads) {
    auto* base = reinterpret_cast<uint4*>(static_cast<char*>(multicast) + offset);
    for (uint64_t i = thread; i < vectors; i += threads) {
      const uint4 v = src[i];
      asm volatile("multimem.st.relaxed.sys.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(base + i), "r"(v.x), "r"(v.y),
                   "r"(v.z), "r"(v.w)
                   : "memory");
    }
  }
#endif
};

}  // namespace loom::device
