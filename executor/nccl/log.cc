#include "log.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>

namespace loom::nccl {
namespace {

std::atomic<LogLevel> level{LogLevel::kNone};
std::once_flag configured;
std::mutex outputMutex;
FILE* output = stdout;

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  std::string text(name);
  return text.substr(0, text.find('.'));
}

}  // namespace

std::string expandPathPattern(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && (pattern[i + 1] == 'h' || pattern[i + 1] == 'p')) {
      out += pattern[i + 1] == 'h' ? hostName() : std::to_string(getpid());
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

namespace {

const char* levelName(LogLevel value) {
  switch (value) {
    case LogLevel::kVersion:
      return "VERSION";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kTrace:
      return "TRACE";
    case LogLevel::kNone:
      break;
  }
  return "";
}

}  // namespace

void configureLog(const Settings& settings) {
  std::call_once(configured, [&] {
    level = settings.logLevel;
    if (!settings.logFile.empty() && settings.logLevel != LogLevel::kNone) {
      if (FILE* file = std::fopen(expandPathPattern(settings.logFile).c_str(), "w")) {
        output = file;
      }
    }
  });
}

bool logEnabled(LogLevel wanted) {
  return wanted != LogLevel::kNone && level.load(std::memory_order_relaxed) >= wanted;
}

void logLine(LogLevel wanted, int device, const std::string& message) {
  if (!logEnabled(wanted)) return;
  static const std::string host = hostName();
  const std::string line = host + ":" + std::to_string(getpid()) + ":" + std::to_string(long(syscall(SYS_gettid))) +
                           " [" + std::to_string(device) + "] LOOM " + levelName(wanted) + " " + message + "\n";
  std::lock_guard<std::mutex> lock(outputMutex);
  std::fputs(line.c_str(), output);
  std::fflush(output);
}

}  // namespace loom::nccl
