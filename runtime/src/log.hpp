#pragma once

#include <string_view>

namespace loom {

// One line "loom: warning: <message>" on stderr, written with a single write() so that lines of
// concurrent ranks and threads do not interleave.
void logWarning(std::string_view message);

}  // namespace loom
