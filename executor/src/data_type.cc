#include "loom/data_type.hpp"

namespace loom {

static_assert(kDataTypeCount == 7, "update dataTypeName, dataTypeBytes and isFloatingPoint");

std::string_view dataTypeName(DataType value) {
  switch (value) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt32:
      return "int32";
    case DataType::kUInt32:
      return "uint32";
    case DataType::kFloat8E4M3:
      return "float8_e4m3fn";
    case DataType::kFloat8E5M2:
      return "float8_e5m2";
  }
  return "?";
}

std::optional<DataType> dataTypeFromName(std::string_view name) {
  for (size_t i = 0; i < kDataTypeCount; ++i) {
    const auto value = static_cast<DataType>(i);
    if (dataTypeName(value) == name) return value;
  }
  return std::nullopt;
}

uint32_t dataTypeBytes(DataType value) {
  switch (value) {
    case DataType::kFloat32:
    case DataType::kInt32:
    case DataType::kUInt32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
      return 1;
  }
  return 0;
}

bool isFloatingPoint(DataType value) { return value != DataType::kInt32 && value != DataType::kUInt32; }

}  // namespace loom
