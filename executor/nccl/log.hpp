#pragma once

// The library's log, in NCCL's format and by NCCL's rules: lines "host:pid:tid [device] LOOM WARN ..."
// on stdout (or LOOM_NCCL_DEBUG_FILE), at the level LOOM_NCCL_DEBUG (else NCCL_DEBUG) asks for. The
// first communicator of the process sets it up, as NCCL reads its variables once.

#include <string>

#include "settings.hpp"

namespace loom::nccl {

void configureLog(const Settings& settings);
bool logEnabled(LogLevel level);
void logLine(LogLevel level, int device, const std::string& message);
// A file name with NCCL_DEBUG_FILE's %h (host name) and %p (process id) filled in.
std::string expandPathPattern(const std::string& pattern);

}  // namespace loom::nccl
