#pragma once

#include <stdexcept>
#include <string>

namespace loom {

// Every failure Loom reports is an Error with one of these categories, so callers (and the Python
// binding) can tell a bad plan from a dead peer without parsing messages.
enum class ErrorCategory {
  kInvalidPlan,
  kInvalidArgument,
  kTimeout,
  kTransport,
  kCuda,
  kSystem,
};

const char* errorCategoryName(ErrorCategory category);

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, const std::string& message);
  ErrorCategory category() const { return category_; }

 private:
  ErrorCategory category_;
};

// A plan that does not decode or does not make sense. `jsonPath` points at the offending value
// ("gpus[1].threadblocks[3].ops[7].src.index", or "$" for the document itself) and `detail` says
// what is wrong and what was expected. `origin` names the file (or "<memory>").
class PlanError : public Error {
 public:
  PlanError(std::string origin, std::string jsonPath, std::string detail);
  const std::string& origin() const { return origin_; }
  const std::string& jsonPath() const { return jsonPath_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string origin_;
  std::string jsonPath_;
  std::string detail_;
};

}  // namespace loom
