#pragma once

// Element types of reductions and how two elements combine, for the interpreter's kernel and for
// the CPU backend, which runs the same functions on host threads.
//
// Narrow floating types (half, bfloat16, fp8) are stored as raw bits and accumulated in float: a
// reduction over n sources converts each source once, combines in float and rounds once at the
// end, so the result does not depend on how many partial sums were rounded on the way.
//
// Conversions from float round to nearest even. fp8 saturates finite values beyond its range to
// the largest finite value of that sign, as CUDA's __NV_SATFINITE does: a sum that overflows fp8 is
// more useful clamped than as NaN or inf. Infinity stays infinity in e5m2, which has one (an inf
// among the inputs is a value, not an overflow), and saturates in e4m3fn, which has none (again as
// __NV_SATFINITE). NaN stays NaN, as the canonical pattern the hardware writes. The device pass
// uses the hardware conversions; the host pass does the same rounding on the bits, because no
// library this project depends on converts to these formats from C++. Both give the same bits for
// every float input, NaN included (all 2^32 compared on an H100 when this was written).

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "loom/device/macros.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

// Only the device pass knows the pragma (the host compiler of nvcc's host pass would warn).
#if LOOM_DEVICE_PASS
#define LOOM_NUMERIC_UNROLL _Pragma("unroll")
#else
#define LOOM_NUMERIC_UNROLL
#endif

namespace loom::device {

// Storage types: the bits of one element, nothing else, so buffers of them are plain memory.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
struct Float8E4M3 {  // "fn": no infinities, NaN is S.1111.111, largest finite 448
  uint8_t bits;
};
struct Float8E5M2 {  // IEEE-like: infinities, largest finite 57344
  uint8_t bits;
};
static_assert(std::is_trivially_copyable_v<Half> && sizeof(Half) == 2 && alignof(Half) == 2);
static_assert(std::is_trivially_copyable_v<BFloat16> && sizeof(BFloat16) == 2 && alignof(BFloat16) == 2);
static_assert(std::is_trivially_copyable_v<Float8E4M3> && sizeof(Float8E4M3) == 1 && alignof(Float8E4M3) == 1);
static_assert(std::is_trivially_copyable_v<Float8E5M2> && sizeof(Float8E5M2) == 1 && alignof(Float8E5M2) == 1);

// Same values as loom::ReduceOp (loom/plan.hpp), so the dispatch can cast one to the other.
enum class ReduceKind : uint8_t { kSum = 0, kMin = 1, kMax = 2 };

namespace detail {

LOOM_HOST_DEVICE uint32_t floatBits(float value) {
#if LOOM_DEVICE_PASS
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

LOOM_HOST_DEVICE float floatFromBits(uint32_t bits) {
#if LOOM_DEVICE_PASS
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

inline constexpr uint32_t kFloatCanonicalNaN = 0x7FFFFFFF;

// Formats narrower than float: a sign bit, kExpBits, kMantBits. IEEE-like formats keep the top
// exponent for infinities and NaN, and their infinity is the pattern after kMaxFinite. kSaturate:
// finite values past kMaxFinite become kMaxFinite rather than infinity. kNaN is the canonical NaN
// that the hardware conversions write.
struct HalfFormat {
  static constexpr int kExpBits = 5, kMantBits = 10;
  static constexpr bool kIeee = true, kSaturate = false;
  static constexpr uint32_t kMaxFinite = 0x7BFF, kNaN = 0x7FFF;
};
struct BFloat16Format {
  static constexpr int kExpBits = 8, kMantBits = 7;
  static constexpr bool kIeee = true, kSaturate = false;
  static constexpr uint32_t kMaxFinite = 0x7F7F, kNaN = 0x7FFF;
};
struct E4M3Format {
  static constexpr int kExpBits = 4, kMantBits = 3;
  static constexpr bool kIeee = false, kSaturate = true;
  static constexpr uint32_t kMaxFinite = 0x7E, kNaN = 0x7F;
};
struct E5M2Format {
  static constexpr int kExpBits = 5, kMantBits = 2;
  static constexpr bool kIeee = true, kSaturate = true;
  static constexpr uint32_t kMaxFinite = 0x7B, kNaN = 0x7F;
};

// Rounds a float to the nearest Format value, ties to even, and returns its bits. It works on the
// 24-bit significand and drops more bits once the exponent is below the format's smallest normal
// one, so subnormal results round at the right place with the same code. The kept bits include the
// hidden bit, so adding them to (exponent - smallest normal exponent) << kMantBits gives the
// encoding, and a round-up out of the mantissa carries into the exponent as it should.
template <typename Format>
LOOM_HOST_DEVICE uint32_t encodeNarrow(float value) {
  constexpr int kMinExp = 2 - (1 << (Format::kExpBits - 1));
  const uint32_t bits = floatBits(value);
  const uint32_t sign = (bits >> 31) << (Format::kExpBits + Format::kMantBits);
  const uint32_t magnitude = bits & 0x7FFFFFFF;
  if (magnitude > 0x7F800000) return Format::kNaN;
  const uint32_t expField = magnitude >> 23;
  const uint32_t significand = (magnitude & 0x7FFFFF) | (expField != 0 ? 0x800000u : 0u);
  const int exp = int(expField != 0 ? expField : 1) - 127;
  const int extra = exp < kMinExp ? kMinExp - exp : 0;
  int shift = 23 - Format::kMantBits + extra;
  if (shift > 31) shift = 31;  // the significand has 24 bits: past that everything rounds to zero
  uint32_t kept = significand >> shift;
  const uint32_t dropped = significand & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  if (dropped > halfway || (dropped == halfway && (kept & 1))) ++kept;
  const uint32_t encoded = (uint32_t(exp + extra - kMinExp) << Format::kMantBits) + kept;
  if (encoded > Format::kMaxFinite) {
    const bool toInfinity = Format::kIeee && (!Format::kSaturate || magnitude == 0x7F800000);
    return sign | (toInfinity ? Format::kMaxFinite + 1 : Format::kMaxFinite);
  }
  return sign | encoded;
}

// Exact (every half and fp8 value is a float). A subnormal is mantissa * 2^(kMinExp - kMantBits), a
// normal float for these formats, so one multiplication by that power of two gives it.
template <typename Format>
LOOM_HOST_DEVICE float decodeNarrow(uint32_t bits) {
  constexpr int kBias = (1 << (Format::kExpBits - 1)) - 1;
  constexpr int kSubnormalExpField = 127 + (1 - kBias) - Format::kMantBits;
  static_assert(kSubnormalExpField > 0, "subnormals of this format are not normal floats");
  constexpr uint32_t kExpMask = (1u << Format::kExpBits) - 1, kMantMask = (1u << Format::kMantBits) - 1;
  constexpr uint32_t kMagnitudeMask = (1u << (Format::kExpBits + Format::kMantBits)) - 1;
  const uint32_t sign = ((bits >> (Format::kExpBits + Format::kMantBits)) & 1) << 31;
  const uint32_t expField = (bits >> Format::kMantBits) & kExpMask, mantissa = bits & kMantMask;
  if (Format::kIeee ? expField == kExpMask : (bits & kMagnitudeMask) == Format::kNaN) {
    return floatFromBits(Format::kIeee && mantissa == 0 ? sign | 0x7F800000 : kFloatCanonicalNaN);
  }
  if (expField == 0) {
    return floatFromBits(sign | floatBits(float(mantissa) * floatFromBits(uint32_t(kSubnormalExpField) << 23)));
  }
  return floatFromBits(sign | (expField - kBias + 127) << 23 | mantissa << (23 - Format::kMantBits));
}

}  // namespace detail

// Numeric<T>: the accumulator type of T and the conversions to and from it.
template <typename T>
struct Numeric;

template <>
struct Numeric<float> {
  using Acc = float;
  LOOM_HOST_DEVICE static Acc toAcc(float value) { return value; }
  LOOM_HOST_DEVICE static float fromAcc(Acc value) { return value; }
};

template <>
struct Numeric<int32_t> {
  using Acc = int32_t;
  LOOM_HOST_DEVICE static Acc toAcc(int32_t value) { return value; }
  LOOM_HOST_DEVICE static int32_t fromAcc(Acc value) { return value; }
};

template <>
struct Numeric<uint32_t> {
  using Acc = uint32_t;
  LOOM_HOST_DEVICE static Acc toAcc(uint32_t value) { return value; }
  LOOM_HOST_DEVICE static uint32_t fromAcc(Acc value) { return value; }
};

template <>
struct Numeric<Half> {
  using Acc = float;
  LOOM_HOST_DEVICE static Acc toAcc(Half value) {
#if LOOM_DEVICE_PASS
    return __half2float(__ushort_as_half(value.bits));
#else
    return detail::decodeNarrow<detail::HalfFormat>(value.bits);
#endif
  }
  LOOM_HOST_DEVICE static Half fromAcc(Acc value) {
#if LOOM_DEVICE_PASS
    return Half{__half_as_ushort(__float2half_rn(value))};
#else
    return Half{uint16_t(detail::encodeNarrow<detail::HalfFormat>(value))};
#endif
  }
};

template <>
struct Numeric<BFloat16> {
  using Acc = float;
  // bfloat16 is the top half of a float, so widening is a shift on both sides.
  LOOM_HOST_DEVICE static Acc toAcc(BFloat16 value) { return detail::floatFromBits(uint32_t(value.bits) << 16); }
  LOOM_HOST_DEVICE static BFloat16 fromAcc(Acc value) {
#if LOOM_DEVICE_PASS
    return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(value))};
#else
    return BFloat16{uint16_t(detail::encodeNarrow<detail::BFloat16Format>(value))};
#endif
  }
};

// fp8 widens through half on the device (the hardware converts fp8 pairs to half pairs; every fp8
// value is a half, so nothing is rounded).
template <>
struct Numeric<Float8E4M3> {
  using Acc = float;
  LOOM_HOST_DEVICE static Acc toAcc(Float8E4M3 value) {
#if LOOM_DEVICE_PASS
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(value.bits, __NV_E4M3)));
#else
    return detail::decodeNarrow<detail::E4M3Format>(value.bits);
#endif
  }
  LOOM_HOST_DEVICE static Float8E4M3 fromAcc(Acc value) {
#if LOOM_DEVICE_PASS
    return Float8E4M3{__nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3)};
#else
    return Float8E4M3{uint8_t(detail::encodeNarrow<detail::E4M3Format>(value))};
#endif
  }
};

template <>
struct Numeric<Float8E5M2> {
  using Acc = float;
  LOOM_HOST_DEVICE static Acc toAcc(Float8E5M2 value) {
#if LOOM_DEVICE_PASS
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(value.bits, __NV_E5M2)));
#else
    return detail::decodeNarrow<detail::E5M2Format>(value.bits);
#endif
  }
  LOOM_HOST_DEVICE static Float8E5M2 fromAcc(Acc value) {
#if LOOM_DEVICE_PASS
    // The hardware's satfinite turns infinities into the largest finite value too: put them back.
    const uint8_t saturated = __nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E5M2);
    const bool infinite = (__float_as_uint(value) & 0x7FFFFFFF) == 0x7F800000;
    return Float8E5M2{uint8_t(infinite ? saturated + 1 : saturated)};  // 0x7B + 1 is inf, 0xFB + 1 -inf
#else
    return Float8E5M2{uint8_t(detail::encodeNarrow<detail::E5M2Format>(value))};
#endif
  }
};

// Integer sums wrap: they are computed unsigned, where overflow is defined.
template <ReduceKind K, typename Acc>
LOOM_HOST_DEVICE Acc combine(Acc a, Acc b) {
  if constexpr (K == ReduceKind::kSum) {
    if constexpr (std::is_integral_v<Acc>) {
      return Acc(std::make_unsigned_t<Acc>(a) + std::make_unsigned_t<Acc>(b));
    } else {
      return a + b;
    }
  } else if constexpr (K == ReduceKind::kMin) {
    return a < b ? a : b;
  } else {
    return a < b ? b : a;
  }
}

template <ReduceKind K, typename T>
LOOM_HOST_DEVICE T combineValues(T a, T b) {
  return Numeric<T>::fromAcc(combine<K>(Numeric<T>::toAcc(a), Numeric<T>::toAcc(b)));
}

// 16-byte packs, the unit of the interpreter's vector loops. The caller does the 16-byte loads and
// stores; these convert, combine and round the elements of one pack.
template <typename T>
inline constexpr uint32_t kElementsPer16 = 16 / sizeof(T);

template <typename T>
struct AccPack {
  typename Numeric<T>::Acc v[kElementsPer16<T>];
};

namespace detail {

// The caller's 16 bytes are usually an object of another type (a Vec16 it loaded). On the host the
// elements go through memcpy, which type-based alias analysis may not reorder around the caller's
// accesses to that object; nvcc code reads such registers by cast, as the rest of the device code.
template <typename T>
LOOM_HOST_DEVICE T loadElement(const T* at) {
#if LOOM_DEVICE_PASS
  return *at;
#else
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
#endif
}

template <typename T>
LOOM_HOST_DEVICE void storeElement(T* at, T value) {
#if LOOM_DEVICE_PASS
  *at = value;
#else
  std::memcpy(at, &value, sizeof(T));
#endif
}

}  // namespace detail

template <typename T>
LOOM_HOST_DEVICE AccPack<T> toAccPack(const T* sixteenBytes) {
  AccPack<T> acc;
  LOOM_NUMERIC_UNROLL
  for (uint32_t i = 0; i < kElementsPer16<T>; ++i) acc.v[i] = Numeric<T>::toAcc(detail::loadElement(sixteenBytes + i));
  return acc;
}

template <ReduceKind K, typename T>
LOOM_HOST_DEVICE void accumulate(AccPack<T>& acc, const T* sixteenBytes) {
  LOOM_NUMERIC_UNROLL
  for (uint32_t i = 0; i < kElementsPer16<T>; ++i) {
    acc.v[i] = combine<K>(acc.v[i], Numeric<T>::toAcc(detail::loadElement(sixteenBytes + i)));
  }
}

template <typename T>
LOOM_HOST_DEVICE void fromAccPack(const AccPack<T>& acc, T* sixteenBytes) {
  LOOM_NUMERIC_UNROLL
  for (uint32_t i = 0; i < kElementsPer16<T>; ++i) {
    detail::storeElement(sixteenBytes + i, Numeric<T>::fromAcc(acc.v[i]));
  }
}

// Two sources: acc[i] = combine(acc[i], other[i]), rounded once.
template <ReduceKind K, typename T>
LOOM_HOST_DEVICE void combinePack(T* acc, const T* other) {
  AccPack<T> sum = toAccPack(acc);
  accumulate<K>(sum, other);
  fromAccPack(sum, acc);
}

}  // namespace loom::device

#undef LOOM_NUMERIC_UNROLL
