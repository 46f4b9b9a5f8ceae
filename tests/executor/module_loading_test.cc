// requireEagerModuleLoading: the one check behind the refusals of ranks sharing a GPU and of port
// channels whose proxy makes CUDA calls (their messages are checked on GPUs).

#include "module_loading.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "loom/error.hpp"

namespace loom {
namespace {

std::string refusal(const char* setting) {
  if (setting) {
    setenv("CUDA_MODULE_LOADING", setting, 1);
  } else {
    unsetenv("CUDA_MODULE_LOADING");
  }
  try {
    requireEagerModuleLoading("plan 'p', rank 0: it needs", "because");
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
    return error.what();
  }
  return "";
}

TEST(ModuleLoading, OnlyEagerPassesAndTheRefusalSaysWhatItIs) {
  const char* before = std::getenv("CUDA_MODULE_LOADING");
  const std::string saved = before ? before : "";
  EXPECT_EQ(refusal("EAGER"), "");
  EXPECT_NE(refusal("LAZY").find("plan 'p', rank 0: it needs CUDA_MODULE_LOADING=EAGER in the environment before "
                                 "CUDA starts (it is LAZY): because"),
            std::string::npos);
  EXPECT_NE(refusal(nullptr).find("(it is unset, so LAZY): because"), std::string::npos);
  EXPECT_NE(refusal("").find("(it is unset, so LAZY)"), std::string::npos);
  if (before) {
    setenv("CUDA_MODULE_LOADING", saved.c_str(), 1);
  } else {
    unsetenv("CUDA_MODULE_LOADING");
  }
}

}  // namespace
}  // namespace loom
