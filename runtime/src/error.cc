#include "loom/error.hpp"

#include <utility>

namespace loom {

const char* errorCategoryName(ErrorCategory category) {
  switch (category) {
    case ErrorCategory::kInvalidPlan:
      return "invalid plan";
    case ErrorCategory::kInvalidArgument:
      return "invalid argument";
    case ErrorCategory::kTimeout:
      return "timeout";
    case ErrorCategory::kTransport:
      return "transport";
    case ErrorCategory::kCuda:
      return "CUDA";
    case ErrorCategory::kSystem:
      return "system";
  }
  return "unknown";
}

Error::Error(ErrorCategory category, const std::string& message) : std::runtime_error(message), category_(category) {}

static std::string planMessage(const std::string& origin, const std::string& jsonPath, const std::string& detail) {
  std::string message;
  if (!origin.empty()) message += origin + ": ";
  message += jsonPath + ": " + detail;
  return message;
}

PlanError::PlanError(std::string origin, std::string jsonPath, std::string detail)
    : Error(ErrorCategory::kInvalidPlan, planMessage(origin, jsonPath, detail)),
      origin_(std::move(origin)),
      jsonPath_(std::move(jsonPath)),
      detail_(std::move(detail)) {}

}  // namespace loom
