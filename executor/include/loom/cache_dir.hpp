#pragma once

// Loom's cache directory. LOOM_CACHE_DIR names the cache root (never its `default` folder); without
// it the root is ~/.cache/loom. Bundled plans live in <root>/default (installed by
// `loom install-plans`, or on first use: default_plans.hpp), JIT-compiled plans in <root>/jit.
// LOOM_DEFAULT_PLANS=0 (or false, no, off) turns the bundled plans off (only the user's plans are
// selected). compiler/loom/plan/cache.py follows the same rules.

#include <string>

namespace loom {

std::string cacheRoot();
std::string defaultPlansDirectory();
bool defaultPlansEnabled();  // LOOM_DEFAULT_PLANS: 1/0, true/false, yes/no, on/off (default on)

}  // namespace loom
