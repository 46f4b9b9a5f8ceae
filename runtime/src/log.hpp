#pragma once

#include <string_view>

namespace loom {

// One line "loom: warning: <message>" on stderr, written with a single write() so that lines of
// concurrent ranks and threads do not interleave.
void logWarning(std::string_view message);

// "loom: info: <message>", the same way, when LOOM_DEBUG=INFO (what a job's operator asks to see: which
// interface, which rule); nothing otherwise.
void logInfo(std::string_view message);

}  // namespace loom
