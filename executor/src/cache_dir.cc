#include "loom/cache_dir.hpp"

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <pwd.h>
#include <unistd.h>

#include "environment.hpp"
#include "loom/error.hpp"

namespace loom {

std::string cacheRoot() {
  if (const char* root = std::getenv("LOOM_CACHE_DIR"); root != nullptr && *root != '\0') return root;
  // As Python's Path.home(): HOME, else the password database.
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    const passwd* entry = getpwuid(getuid());
    home = entry != nullptr ? entry->pw_dir : nullptr;
  }
  if (home == nullptr || *home == '\0') {
    throw Error(ErrorCategory::kInvalidArgument, "cache directory: LOOM_CACHE_DIR is not set and there is no home");
  }
  return (std::filesystem::path(home) / ".cache" / "loom").string();
}

std::string defaultPlansDirectory() { return (std::filesystem::path(cacheRoot()) / "default").string(); }

bool defaultPlansEnabled() {
  const std::optional<std::string> value = processEnvironment("LOOM_DEFAULT_PLANS");
  return !value || parseBoolean(*value, "LOOM_DEFAULT_PLANS");
}

}  // namespace loom
