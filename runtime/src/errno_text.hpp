#pragma once

#include <cstring>
#include <string>

namespace loom {

// "Connection refused (errno 111)": how runtime errors quote a system call's failure.
inline std::string errnoText(int error) {
  return std::string(std::strerror(error)) + " (errno " + std::to_string(error) + ")";
}

}  // namespace loom
