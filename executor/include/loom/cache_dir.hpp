#pragma once

// Loom's cache directory. LOOM_CACHE_DIR names the cache root (never its `default` folder); without
// it the root is ~/.cache/loom. Bundled plans live in <root>/default (installed by
// `loom install-plans`), JIT-compiled plans in <root>/jit. LOOM_DEFAULT_PLANS=0 turns the bundled plans
// off (only the user's plans are selected). compiler/loom/cache.py follows the same rules.

#include <string>

namespace loom {

std::string cacheRoot();
std::string defaultPlansDirectory();
bool defaultPlansEnabled();  // false when LOOM_DEFAULT_PLANS is 0

}  // namespace loom
