#pragma once

// Element types of the buffers a plan reduces. Names are those of torch and ml_dtypes, so a Python
// caller can pass `str(tensor.dtype)` without "torch." and get the same type back.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace loom {

enum class DataType : uint8_t { kFloat32, kFloat16, kBFloat16, kInt32, kUInt32, kFloat8E4M3, kFloat8E5M2 };
inline constexpr size_t kDataTypeCount = static_cast<size_t>(DataType::kFloat8E5M2) + 1;

// "float32", "float16", "bfloat16", "int32", "uint32", "float8_e4m3fn", "float8_e5m2".
std::string_view dataTypeName(DataType value);
// Accepts exactly the names dataTypeName gives (no aliases such as "fp32" or "half").
std::optional<DataType> dataTypeFromName(std::string_view name);
uint32_t dataTypeBytes(DataType value);
bool isFloatingPoint(DataType value);

}  // namespace loom
