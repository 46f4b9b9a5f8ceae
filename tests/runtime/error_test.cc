#include "loom/error.hpp"

#include <gtest/gtest.h>

namespace loom {
namespace {

TEST(ErrorTest, PlanErrorCarriesPathDetailAndOrigin) {
  PlanError error("plan.json", "gpus[1].threadblocks[3].ops[7].src.index", "9 is outside the input buffer (8 chunks)");
  EXPECT_EQ(error.category(), ErrorCategory::kInvalidPlan);
  EXPECT_EQ(error.jsonPath(), "gpus[1].threadblocks[3].ops[7].src.index");
  EXPECT_EQ(error.detail(), "9 is outside the input buffer (8 chunks)");
  EXPECT_STREQ(error.what(),
               "plan.json: gpus[1].threadblocks[3].ops[7].src.index: 9 is outside the input buffer (8 chunks)");
}

TEST(ErrorTest, PlanErrorWithoutOriginHasNoLeadingSeparator) {
  PlanError error("", "$", "invalid JSON");
  EXPECT_STREQ(error.what(), "$: invalid JSON");
}

TEST(ErrorTest, CategoriesHaveNames) {
  EXPECT_STREQ(errorCategoryName(ErrorCategory::kTimeout), "timeout");
  EXPECT_STREQ(errorCategoryName(ErrorCategory::kCuda), "CUDA");
  Error error(ErrorCategory::kTransport, "peer 3 closed the connection");
  EXPECT_EQ(error.category(), ErrorCategory::kTransport);
  EXPECT_STREQ(error.what(), "peer 3 closed the connection");
}

}  // namespace
}  // namespace loom
