#include "default_plans.hpp"

#include <exception>
#include <string>

#include "log.hpp"
#include "loom/cache_dir.hpp"
#include "loom/default_plans.hpp"

namespace loom::nccl {

void installDefaultPlansOnFirstUse(int device) {
  try {
    if (!defaultPlansEnabled()) return;
    const std::string bundled = bundledPlansDirectory();
    const std::string target = defaultPlansDirectory();
    if (ensureDefaultPlansInstalled(bundled, target)) {
      logLine(LogLevel::kInfo, device, "installed the bundled Loom plans of " + bundled + " into " + target);
    }
  } catch (const std::exception& e) {
    logLine(LogLevel::kWarn, device, std::string("cannot install the bundled Loom plans: ") + e.what());
  }
}

}  // namespace loom::nccl
