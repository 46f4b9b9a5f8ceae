#include "log.hpp"

#include <unistd.h>

#include <string>

namespace loom {

void logWarning(std::string_view message) {
  std::string line = "loom: warning: ";
  line += message;
  line += '\n';
  const char* data = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t written = ::write(STDERR_FILENO, data, left);
    if (written <= 0) return;  // nowhere left to report a failing stderr
    data += written;
    left -= static_cast<size_t>(written);
  }
}

}  // namespace loom
