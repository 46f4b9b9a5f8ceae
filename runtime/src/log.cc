#include "log.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace loom {

namespace {

void writeLine(std::string_view prefix, std::string_view message) {
  std::string line(prefix);
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

}  // namespace

void logWarning(std::string_view message) { writeLine("loom: warning: ", message); }

void logInfo(std::string_view message) {
  static const bool wanted = [] {
    const char* level = std::getenv("LOOM_DEBUG");
    return level != nullptr && std::string_view(level) == "INFO";
  }();
  if (wanted) writeLine("loom: info: ", message);
}

}  // namespace loom
