#pragma once

// Reading Loom's environment variables strictly: a value that is set but malformed is an
// InvalidArgument error naming the variable, never silently replaced by a default.

#include <cstdint>
#include <optional>
#include <string>

namespace loom {

// A variable of this process's environment; nullopt when it is unset or empty.
std::optional<std::string> processEnvironment(const char* name);

// A decimal integer in [min, max] (no sign unless min < 0, no spaces, no trailing characters).
int64_t parseInteger(const std::string& text, int64_t min, int64_t max, const std::string& what);

// 1/0, true/false, yes/no, on/off (any case); anything else is an error.
bool parseBoolean(const std::string& text, const std::string& what);

}  // namespace loom
