// Element conversions and reductions of loom/device/numeric.hpp (host pass) and the DataType names.
// Expected bits come from numpy (float16) and ml_dtypes (bfloat16, float8_e4m3fn, float8_e5m2);
// the saturating fp8 cases follow CUDA's __NV_SATFINITE, where ml_dtypes gives NaN or inf.

#include "loom/device/numeric.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "loom/data_type.hpp"

namespace loom::device {
namespace {

float bitsToFloat(uint32_t bits) { return detail::floatFromBits(bits); }
uint32_t floatToBits(float value) { return detail::floatBits(value); }

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t halfBits(float value) { return Numeric<Half>::fromAcc(value).bits; }
uint32_t bf16Bits(float value) { return Numeric<BFloat16>::fromAcc(value).bits; }
uint32_t e4m3Bits(float value) { return Numeric<Float8E4M3>::fromAcc(value).bits; }
uint32_t e5m2Bits(float value) { return Numeric<Float8E5M2>::fromAcc(value).bits; }

TEST(NumericTest, HalfFromFloat) {
  EXPECT_EQ(halfBits(1.0f), 0x3C00u);
  EXPECT_EQ(halfBits(-2.5f), 0xC100u);
  EXPECT_EQ(halfBits(65504.0f), 0x7BFFu);
  EXPECT_EQ(halfBits(bitsToFloat(0x477FEFFF)), 0x7BFFu);  // just below the midpoint to infinity
  EXPECT_EQ(halfBits(65520.0f), 0x7C00u);                 // the midpoint rounds to even: infinity
  EXPECT_EQ(halfBits(kInf), 0x7C00u);
  EXPECT_EQ(halfBits(-kInf), 0xFC00u);
  EXPECT_EQ(halfBits(-0.0f), 0x8000u);
  EXPECT_EQ(halfBits(kNaN), 0x7FFFu);
  EXPECT_EQ(halfBits(-kNaN), 0x7FFFu);
  EXPECT_EQ(halfBits(std::ldexp(1.0f, -14)), 0x0400u);         // smallest normal
  EXPECT_EQ(halfBits(1023 * std::ldexp(1.0f, -24)), 0x03FFu);  // largest subnormal
  EXPECT_EQ(halfBits(std::ldexp(1.0f, -24)), 0x0001u);         // smallest subnormal
  EXPECT_EQ(halfBits(std::ldexp(1.0f, -25)), 0x0000u);         // tie between 0 and 2^-24: even
  EXPECT_EQ(halfBits(bitsToFloat(0x33000001)), 0x0001u);       // just above that tie
  EXPECT_EQ(halfBits(3 * std::ldexp(1.0f, -25)), 0x0002u);     // tie between 1 and 2 ulps: even
  EXPECT_EQ(halfBits(1.0f + std::ldexp(1.0f, -11)), 0x3C00u);
  EXPECT_EQ(halfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02u);
  EXPECT_EQ(halfBits(std::ldexp(1.0f, -40)), 0x0000u);
}

TEST(NumericTest, HalfToFloat) {
  EXPECT_EQ(Numeric<Half>::toAcc(Half{0x7BFF}), 65504.0f);
  EXPECT_EQ(Numeric<Half>::toAcc(Half{0xC100}), -2.5f);
  EXPECT_EQ(Numeric<Half>::toAcc(Half{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(Numeric<Half>::toAcc(Half{0x7C00}), kInf);
  EXPECT_EQ(floatToBits(Numeric<Half>::toAcc(Half{0x8000})), 0x80000000u);
  EXPECT_TRUE(std::isnan(Numeric<Half>::toAcc(Half{0x7C01})));
  EXPECT_TRUE(std::isnan(Numeric<Half>::toAcc(Half{0xFE00})));
}

TEST(NumericTest, BFloat16FromFloat) {
  EXPECT_EQ(bf16Bits(1.0f), 0x3F80u);
  EXPECT_EQ(bf16Bits(-2.5f), 0xC020u);
  EXPECT_EQ(bf16Bits(std::ldexp(1.0f, -8)), 0x3B80u);
  EXPECT_EQ(bf16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3F80u);  // tie: even
  EXPECT_EQ(bf16Bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81u);
  EXPECT_EQ(bf16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82u);  // tie: even
  EXPECT_EQ(bf16Bits(std::numeric_limits<float>::max()), 0x7F80u);
  EXPECT_EQ(bf16Bits(bitsToFloat(0x00010000)), 0x0001u);  // float subnormals are bf16 subnormals
  EXPECT_EQ(bf16Bits(bitsToFloat(0x00008000)), 0x0000u);
  EXPECT_EQ(bf16Bits(bitsToFloat(0x00018000)), 0x0002u);
  EXPECT_EQ(bf16Bits(-0.0f), 0x8000u);
  EXPECT_EQ(bf16Bits(-kInf), 0xFF80u);
  EXPECT_EQ(bf16Bits(kNaN), 0x7FFFu);
  EXPECT_EQ(bf16Bits(bitsToFloat(0x7F800001)), 0x7FFFu);  // a NaN whose payload would truncate to inf
}

TEST(NumericTest, BFloat16ToFloat) {
  EXPECT_EQ(Numeric<BFloat16>::toAcc(BFloat16{0x3F81}), 1.0078125f);
  EXPECT_EQ(Numeric<BFloat16>::toAcc(BFloat16{0x0001}), std::ldexp(1.0f, -133));
  EXPECT_EQ(Numeric<BFloat16>::toAcc(BFloat16{0xFF80}), -kInf);
}

TEST(NumericTest, Float8E4M3FromFloat) {
  EXPECT_EQ(e4m3Bits(1.0f), 0x38u);
  EXPECT_EQ(e4m3Bits(-2.5f), 0xC2u);
  EXPECT_EQ(e4m3Bits(1.0625f), 0x38u);  // tie: even
  EXPECT_EQ(e4m3Bits(1.1875f), 0x3Au);  // tie: even
  EXPECT_EQ(e4m3Bits(448.0f), 0x7Eu);
  EXPECT_EQ(e4m3Bits(464.0f), 0x7Eu);  // saturates (480 would be the NaN pattern)
  EXPECT_EQ(e4m3Bits(1e9f), 0x7Eu);
  EXPECT_EQ(e4m3Bits(-1e9f), 0xFEu);
  EXPECT_EQ(e4m3Bits(kInf), 0x7Eu);
  EXPECT_EQ(e4m3Bits(-kInf), 0xFEu);
  EXPECT_EQ(e4m3Bits(std::ldexp(1.0f, -6)), 0x08u);      // smallest normal
  EXPECT_EQ(e4m3Bits(7 * std::ldexp(1.0f, -9)), 0x07u);  // largest subnormal
  EXPECT_EQ(e4m3Bits(0.001953125f), 0x01u);              // 2^-9, smallest subnormal
  EXPECT_EQ(e4m3Bits(std::ldexp(1.0f, -10)), 0x00u);     // tie: even
  EXPECT_EQ(e4m3Bits(3 * std::ldexp(1.0f, -10)), 0x02u);
  EXPECT_EQ(e4m3Bits(-0.0f), 0x80u);
  EXPECT_EQ(e4m3Bits(kNaN), 0x7Fu);
  EXPECT_EQ(e4m3Bits(-kNaN), 0x7Fu);
}

TEST(NumericTest, Float8E4M3ToFloat) {
  EXPECT_EQ(Numeric<Float8E4M3>::toAcc(Float8E4M3{0x7E}), 448.0f);
  EXPECT_EQ(Numeric<Float8E4M3>::toAcc(Float8E4M3{0x78}), 256.0f);  // top exponent is finite in "fn"
  EXPECT_EQ(Numeric<Float8E4M3>::toAcc(Float8E4M3{0x01}), 0.001953125f);
  EXPECT_EQ(Numeric<Float8E4M3>::toAcc(Float8E4M3{0xC2}), -2.5f);
  EXPECT_TRUE(std::isnan(Numeric<Float8E4M3>::toAcc(Float8E4M3{0x7F})));
  EXPECT_TRUE(std::isnan(Numeric<Float8E4M3>::toAcc(Float8E4M3{0xFF})));
}

TEST(NumericTest, Float8E5M2FromFloat) {
  EXPECT_EQ(e5m2Bits(1.0f), 0x3Cu);
  EXPECT_EQ(e5m2Bits(-2.5f), 0xC1u);
  EXPECT_EQ(e5m2Bits(57344.0f), 0x7Bu);
  EXPECT_EQ(e5m2Bits(61440.0f), 0x7Bu);  // the midpoint to infinity saturates too
  EXPECT_EQ(e5m2Bits(1e6f), 0x7Bu);
  EXPECT_EQ(e5m2Bits(-1e6f), 0xFBu);
  EXPECT_EQ(e5m2Bits(kInf), 0x7Cu);  // infinity is a value e5m2 has
  EXPECT_EQ(e5m2Bits(-kInf), 0xFCu);
  EXPECT_EQ(e5m2Bits(std::ldexp(1.0f, -14)), 0x04u);  // smallest normal
  EXPECT_EQ(e5m2Bits(std::ldexp(1.0f, -16)), 0x01u);  // smallest subnormal
  EXPECT_EQ(e5m2Bits(std::ldexp(1.0f, -17)), 0x00u);  // tie: even
  EXPECT_EQ(e5m2Bits(3 * std::ldexp(1.0f, -17)), 0x02u);
  EXPECT_EQ(e5m2Bits(-0.0f), 0x80u);
  EXPECT_EQ(e5m2Bits(kNaN), 0x7Fu);
}

TEST(NumericTest, Float8E5M2ToFloat) {
  EXPECT_EQ(Numeric<Float8E5M2>::toAcc(Float8E5M2{0x7B}), 57344.0f);
  EXPECT_EQ(Numeric<Float8E5M2>::toAcc(Float8E5M2{0x01}), std::ldexp(1.0f, -16));
  EXPECT_EQ(Numeric<Float8E5M2>::toAcc(Float8E5M2{0x7C}), kInf);
  EXPECT_EQ(Numeric<Float8E5M2>::toAcc(Float8E5M2{0xFC}), -kInf);
  EXPECT_TRUE(std::isnan(Numeric<Float8E5M2>::toAcc(Float8E5M2{0x7D})));
  EXPECT_TRUE(std::isnan(Numeric<Float8E5M2>::toAcc(Float8E5M2{0xFF})));
}

// Every pattern: non-NaN values survive widening and narrowing unchanged, NaN becomes the canonical
// NaN, and the positive finite values widen in increasing order (which a wrong but invertible
// decoding would break).
template <typename T, typename Bits>
void checkEveryPattern(uint32_t patterns, uint32_t canonicalNaN) {
  for (uint32_t bits = 0; bits < patterns; ++bits) {
    const float wide = Numeric<T>::toAcc(T{Bits(bits)});
    const uint32_t back = Numeric<T>::fromAcc(wide).bits;
    if (std::isnan(wide)) {
      EXPECT_EQ(back, canonicalNaN) << std::hex << bits;
    } else {
      EXPECT_EQ(back, bits) << std::hex << bits;
      const float next = Numeric<T>::toAcc(T{Bits(bits + 1)});
      if (bits < patterns / 2 - 1 && !std::isnan(next)) {
        EXPECT_LT(wide, next) << std::hex << bits;
      }
    }
  }
}

TEST(NumericTest, EveryPatternRoundTrips) {
  checkEveryPattern<Half, uint16_t>(1u << 16, 0x7FFF);
  checkEveryPattern<BFloat16, uint16_t>(1u << 16, 0x7FFF);
  checkEveryPattern<Float8E4M3, uint8_t>(1u << 8, 0x7F);
  checkEveryPattern<Float8E5M2, uint8_t>(1u << 8, 0x7F);
}

// Random floats in and around each format's range: no other value of the format is nearer than the
// result, and a tie goes to the even pattern.
template <typename T>
void checkNearest(float maxFinite, bool saturates, int minExp, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> exponent(float(minExp - 4), std::log2(maxFinite) + 0.5f);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::exp2(exponent(rng)) * (rng() & 1 ? -1.0f : 1.0f);
    const uint32_t bits = Numeric<T>::fromAcc(x).bits;
    const double error = std::fabs(double(Numeric<T>::toAcc(T{decltype(T::bits)(bits)})) - x);
    if (std::fabs(x) > maxFinite) {
      if (saturates) {
        EXPECT_EQ(std::fabs(Numeric<T>::toAcc(T{decltype(T::bits)(bits)})), maxFinite) << x;
      }
      continue;
    }
    for (const uint32_t neighbour : {bits - 1, bits + 1}) {
      const float value = Numeric<T>::toAcc(T{decltype(T::bits)(neighbour)});
      if (std::isnan(value) || std::isinf(value) || std::signbit(value) != std::signbit(x)) continue;
      const double other = std::fabs(double(value) - x);
      EXPECT_LE(error, other) << x;
      if (error == other) {
        EXPECT_EQ(bits & 1, 0u) << x;
      }
    }
  }
}

TEST(NumericTest, RandomFloatsRoundToNearestEven) {
  checkNearest<Float8E4M3>(448.0f, true, -9, 1);
  checkNearest<Float8E5M2>(57344.0f, true, -16, 2);
  checkNearest<Half>(65504.0f, false, -24, 3);
  checkNearest<BFloat16>(1e30f, false, -133, 4);  // up to 1e30 only: the range is what matters, not its end
}

TEST(NumericTest, CombineScalars) {
  EXPECT_EQ((combine<ReduceKind::kSum>(1.5f, 2.25f)), 3.75f);
  EXPECT_EQ((combine<ReduceKind::kMin>(-1.0f, 2.0f)), -1.0f);
  EXPECT_EQ((combine<ReduceKind::kMax>(-1.0f, 2.0f)), 2.0f);

  constexpr int32_t kIntMax = std::numeric_limits<int32_t>::max(), kIntMin = std::numeric_limits<int32_t>::min();
  EXPECT_EQ((combine<ReduceKind::kSum>(kIntMax, int32_t{1})), kIntMin);
  EXPECT_EQ((combine<ReduceKind::kSum>(kIntMin, int32_t{-1})), kIntMax);
  EXPECT_EQ((combine<ReduceKind::kSum>(int32_t{-5}, int32_t{3})), -2);
  EXPECT_EQ((combine<ReduceKind::kMin>(int32_t{-5}, int32_t{3})), -5);
  EXPECT_EQ((combine<ReduceKind::kMax>(int32_t{-5}, int32_t{3})), 3);

  EXPECT_EQ((combine<ReduceKind::kSum>(0xFFFFFFFFu, 2u)), 1u);
  EXPECT_EQ((combine<ReduceKind::kMin>(0xFFFFFFFFu, 2u)), 2u);
  EXPECT_EQ((combine<ReduceKind::kMax>(0xFFFFFFFFu, 2u)), 0xFFFFFFFFu);
}

TEST(NumericTest, CombineNarrowValues) {
  EXPECT_EQ((combineValues<ReduceKind::kSum>(Half{0x3C00}, Half{0x3C00}).bits), 0x4000u);  // 1 + 1
  EXPECT_EQ((combineValues<ReduceKind::kSum>(Half{0x7BFF}, Half{0x7BFF}).bits), 0x7C00u);  // overflows to inf
  EXPECT_EQ((combineValues<ReduceKind::kMin>(Half{0xC100}, Half{0x3C00}).bits), 0xC100u);
  EXPECT_EQ((combineValues<ReduceKind::kMax>(Half{0xC100}, Half{0x3C00}).bits), 0x3C00u);

  EXPECT_EQ((combineValues<ReduceKind::kSum>(BFloat16{0x3F80}, BFloat16{0xC020}).bits), 0xBFC0u);  // 1 - 2.5
  EXPECT_EQ((combineValues<ReduceKind::kMin>(BFloat16{0x3F80}, BFloat16{0xC020}).bits), 0xC020u);
  EXPECT_EQ((combineValues<ReduceKind::kMax>(BFloat16{0x3F80}, BFloat16{0xC020}).bits), 0x3F80u);

  EXPECT_EQ((combineValues<ReduceKind::kSum>(Float8E4M3{0x38}, Float8E4M3{0x30}).bits), 0x3Cu);  // 1 + 0.5
  EXPECT_EQ((combineValues<ReduceKind::kSum>(Float8E4M3{0x7E}, Float8E4M3{0x7E}).bits), 0x7Eu);  // saturates
  EXPECT_EQ((combineValues<ReduceKind::kMin>(Float8E4M3{0x38}, Float8E4M3{0xC2}).bits), 0xC2u);
  EXPECT_EQ((combineValues<ReduceKind::kMax>(Float8E4M3{0x38}, Float8E4M3{0xC2}).bits), 0x38u);

  EXPECT_EQ((combineValues<ReduceKind::kSum>(Float8E5M2{0x3C}, Float8E5M2{0x3C}).bits), 0x40u);  // 1 + 1
  EXPECT_EQ((combineValues<ReduceKind::kSum>(Float8E5M2{0x7B}, Float8E5M2{0x7B}).bits), 0x7Bu);  // saturates
  EXPECT_EQ((combineValues<ReduceKind::kSum>(Float8E5M2{0x7C}, Float8E5M2{0x3C}).bits), 0x7Cu);  // inf + 1
  EXPECT_EQ((combineValues<ReduceKind::kSum>(Float8E5M2{0x7C}, Float8E5M2{0xFC}).bits), 0x7Fu);  // inf - inf
  EXPECT_EQ((combineValues<ReduceKind::kMin>(Float8E5M2{0x3C}, Float8E5M2{0xC1}).bits), 0xC1u);
  EXPECT_EQ((combineValues<ReduceKind::kMax>(Float8E5M2{0x3C}, Float8E5M2{0xC1}).bits), 0x3Cu);
}

TEST(NumericTest, PackSizes) {
  EXPECT_EQ(kElementsPer16<float>, 4u);
  EXPECT_EQ(kElementsPer16<int32_t>, 4u);
  EXPECT_EQ(kElementsPer16<Half>, 8u);
  EXPECT_EQ(kElementsPer16<BFloat16>, 8u);
  EXPECT_EQ(kElementsPer16<Float8E4M3>, 16u);
  EXPECT_EQ(sizeof(AccPack<Float8E5M2>), 16 * sizeof(float));
}

// 1 + 2^-11 + 2^-11 in half: rounding after each addition loses both half-ulps (1 + 2^-11 is a tie
// that rounds to 1); the pack accumulates in float and rounds once, to 1 + 2^-10.
TEST(NumericTest, PackRoundsOnce) {
  Half one[8], halfUlp[8];
  for (int i = 0; i < 8; ++i) one[i] = Half{0x3C00}, halfUlp[i] = Half{0x1000};  // 1, 2^-11
  AccPack<Half> acc = toAccPack(one);
  accumulate<ReduceKind::kSum>(acc, halfUlp);
  accumulate<ReduceKind::kSum>(acc, halfUlp);
  Half out[8];
  fromAccPack(acc, out);
  for (const Half& h : out) EXPECT_EQ(h.bits, 0x3C01u);

  Half pairwise[8];
  for (int i = 0; i < 8; ++i) pairwise[i] = one[i];
  combinePack<ReduceKind::kSum>(pairwise, halfUlp);
  combinePack<ReduceKind::kSum>(pairwise, halfUlp);
  for (const Half& h : pairwise) EXPECT_EQ(h.bits, 0x3C00u);
}

TEST(NumericTest, PackCombinesElementwise) {
  const int32_t a[4] = {1, -7, std::numeric_limits<int32_t>::max(), 0};
  const int32_t b[4] = {2, 5, 1, -1};
  const int32_t c[4] = {-4, 9, 0, 3};
  auto reduce = [&](auto kind) {
    AccPack<int32_t> acc = toAccPack(a);
    accumulate<decltype(kind)::value>(acc, b);
    accumulate<decltype(kind)::value>(acc, c);
    int32_t out[4];
    fromAccPack(acc, out);
    return std::vector<int32_t>(out, out + 4);
  };
  using Sum = std::integral_constant<ReduceKind, ReduceKind::kSum>;
  using Min = std::integral_constant<ReduceKind, ReduceKind::kMin>;
  using Max = std::integral_constant<ReduceKind, ReduceKind::kMax>;
  EXPECT_EQ(reduce(Sum{}), (std::vector<int32_t>{-1, 7, std::numeric_limits<int32_t>::min(), 2}));
  EXPECT_EQ(reduce(Min{}), (std::vector<int32_t>{-4, -7, 0, -1}));
  EXPECT_EQ(reduce(Max{}), (std::vector<int32_t>{2, 9, std::numeric_limits<int32_t>::max(), 3}));

  Float8E4M3 x[16], y[16];
  for (int i = 0; i < 16; ++i) x[i] = Float8E4M3{uint8_t(i)}, y[i] = Float8E4M3{uint8_t(0x80 | i)};  // y = -x
  combinePack<ReduceKind::kSum>(x, y);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(x[i].bits, 0u) << i;
}

}  // namespace
}  // namespace loom::device

namespace loom {
namespace {

TEST(DataTypeTest, NamesRoundTrip) {
  const char* names[kDataTypeCount] = {"float32", "float16",       "bfloat16",   "int32",
                                       "uint32",  "float8_e4m3fn", "float8_e5m2"};
  for (size_t i = 0; i < kDataTypeCount; ++i) {
    const auto type = static_cast<DataType>(i);
    EXPECT_EQ(dataTypeName(type), names[i]);
    EXPECT_EQ(dataTypeFromName(names[i]), type) << names[i];
  }
}

TEST(DataTypeTest, RejectsOtherNames) {
  for (const char* name : {"fp32", "half", "bf16", "Float32", "float8_e4m3", "float32 ", "int", ""}) {
    EXPECT_EQ(dataTypeFromName(name), std::nullopt) << name;
  }
}

TEST(DataTypeTest, BytesAndKind) {
  const uint32_t bytes[kDataTypeCount] = {4, 2, 2, 4, 4, 1, 1};
  const bool floating[kDataTypeCount] = {true, true, true, false, false, true, true};
  for (size_t i = 0; i < kDataTypeCount; ++i) {
    EXPECT_EQ(dataTypeBytes(static_cast<DataType>(i)), bytes[i]) << i;
    EXPECT_EQ(isFloatingPoint(static_cast<DataType>(i)), floating[i]) << i;
  }
  EXPECT_EQ(dataTypeBytes(DataType::kFloat16), sizeof(device::Half));
  EXPECT_EQ(dataTypeBytes(DataType::kFloat8E5M2), sizeof(device::Float8E5M2));
}

}  // namespace
}  // namespace loom
