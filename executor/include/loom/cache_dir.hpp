#pragma once

// Loom's cache directory. LOOM_CACHE_DIR names the cache root (never its `default` folder); without
// it the root is ~/.cache/loom. Bundled plans live in <root>/default (installed by
// `loom install-plans`), JIT-compiled plans in <root>/jit. compiler/loom/cache.py follows the same rule.

#include <string>

namespace loom {

std::string cacheRoot();
std::string defaultPlansDirectory();

}  // namespace loom
