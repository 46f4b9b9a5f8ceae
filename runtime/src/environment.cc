#include "environment.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "loom/error.hpp"

namespace loom {

std::optional<std::string> processEnvironment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int64_t parseInteger(const std::string& text, int64_t min, int64_t max, const std::string& what) {
  int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  // from_chars takes no '+' and no spaces, but it does take '-': refuse that where negatives are meaningless.
  const bool signOk = min < 0 || (!text.empty() && text[0] != '-');
  auto [stop, error] = std::from_chars(begin, end, value);
  if (text.empty() || !signOk || error != std::errc() || stop != end || value < min || value > max) {
    throw Error(ErrorCategory::kInvalidArgument, what + ": expected an integer from " + std::to_string(min) + " to " +
                                                     std::to_string(max) + ", got '" + text + "'");
  }
  return value;
}

bool parseBoolean(const std::string& text, const std::string& what) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
  throw Error(ErrorCategory::kInvalidArgument,
              what + ": expected 1/0, true/false, yes/no or on/off, got '" + text + "'");
}

}  // namespace loom
