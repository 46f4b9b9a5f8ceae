#pragma once

// The one place where a call's data type and reduction operator become a template instance of the
// interpreter (7 types x 3 operators). `run` is a generic lambda: run.template operator()<Reduce>().

#include "loom/data_type.hpp"
#include "loom/device/interpreter.hpp"
#include "loom/error.hpp"
#include "loom/plan.hpp"

namespace loom {

template <typename T, typename Run>
void dispatchOperator(ReduceOp op, Run&& run) {
  using device::ReduceKind;
  using device::ReduceUnits;
  switch (op) {
    case ReduceOp::kSum:
      return run.template operator()<ReduceUnits<T, ReduceKind::kSum>>();
    case ReduceOp::kMin:
      return run.template operator()<ReduceUnits<T, ReduceKind::kMin>>();
    case ReduceOp::kMax:
      return run.template operator()<ReduceUnits<T, ReduceKind::kMax>>();
  }
  throw Error(ErrorCategory::kInvalidArgument, "op: unknown reduction operator");
}

template <typename Run>
void dispatchReduce(DataType type, ReduceOp op, Run&& run) {
  switch (type) {
    case DataType::kFloat32:
      return dispatchOperator<float>(op, run);
    case DataType::kFloat16:
      return dispatchOperator<device::Half>(op, run);
    case DataType::kBFloat16:
      return dispatchOperator<device::BFloat16>(op, run);
    case DataType::kInt32:
      return dispatchOperator<int32_t>(op, run);
    case DataType::kUInt32:
      return dispatchOperator<uint32_t>(op, run);
    case DataType::kFloat8E4M3:
      return dispatchOperator<device::Float8E4M3>(op, run);
    case DataType::kFloat8E5M2:
      return dispatchOperator<device::Float8E5M2>(op, run);
  }
  throw Error(ErrorCategory::kInvalidArgument, "dtype: unknown data type");
}

// The floating types, for what only they support (scaling by a fraction: NCCL's average); an
// integer type is an InvalidArgument error naming `what`. `run` is run.template operator()<T>().
template <typename Run>
void dispatchFloating(DataType type, const char* what, Run&& run) {
  switch (type) {
    case DataType::kFloat32:
      return run.template operator()<float>();
    case DataType::kFloat16:
      return run.template operator()<device::Half>();
    case DataType::kBFloat16:
      return run.template operator()<device::BFloat16>();
    case DataType::kFloat8E4M3:
      return run.template operator()<device::Float8E4M3>();
    case DataType::kFloat8E5M2:
      return run.template operator()<device::Float8E5M2>();
    case DataType::kInt32:
    case DataType::kUInt32:
      break;
  }
  throw Error(ErrorCategory::kInvalidArgument,
              std::string(what) + ": " + std::string(dataTypeName(type)) + " is not a floating type");
}

}  // namespace loom
