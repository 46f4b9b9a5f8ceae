#include "module_loading.hpp"

#include <optional>

#include "environment.hpp"
#include "loom/error.hpp"

namespace loom {

void requireEagerModuleLoading(const std::string& subject, const std::string& why) {
  const std::optional<std::string> loading = processEnvironment("CUDA_MODULE_LOADING");
  if (loading && *loading == "EAGER") return;
  throw Error(ErrorCategory::kInvalidArgument, subject +
                                                   " CUDA_MODULE_LOADING=EAGER in the environment before CUDA starts "
                                                   "(it is " +
                                                   (loading ? *loading : std::string("unset, so LAZY")) + "): " + why);
}

}  // namespace loom
