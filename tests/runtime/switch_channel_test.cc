// Switch channels are opt-in and refused whenever NCCL_NVLS_ENABLE=0: only the refusals are tested.
// No test creates a multicast object (it can put a shared GPU host out of service).

#include "loom/switch_channel.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "communicator_test_util.hpp"
#include "loom/error.hpp"

namespace loom {
namespace {

class SwitchChannelGuard : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("LOOM_ENABLE_NVLS");
    unsetenv("NCCL_NVLS_ENABLE");
  }
  void TearDown() override {
    unsetenv("LOOM_ENABLE_NVLS");
    setenv("NCCL_NVLS_ENABLE", "0", 1);  // the state every test host of this project keeps
  }
};

TEST_F(SwitchChannelGuard, OffUnlessAskedFor) {
  std::string why;
  EXPECT_FALSE(switchChannelsAllowed(&why));
  EXPECT_NE(why.find("set LOOM_ENABLE_NVLS=1"), std::string::npos) << why;
  setenv("LOOM_ENABLE_NVLS", "off", 1);
  EXPECT_FALSE(switchChannelsAllowed(&why));
}

TEST_F(SwitchChannelGuard, NcclsSwitchWinsOverLooms) {
  setenv("LOOM_ENABLE_NVLS", "1", 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  std::string why;
  EXPECT_FALSE(switchChannelsAllowed(&why));
  EXPECT_NE(why.find("NCCL_NVLS_ENABLE=0"), std::string::npos) << why;
  unsetenv("NCCL_NVLS_ENABLE");
  EXPECT_TRUE(switchChannelsAllowed(&why));  // asking only; nothing is created
}

TEST_F(SwitchChannelGuard, UnclearValuesAreErrors) {
  setenv("LOOM_ENABLE_NVLS", "maybe", 1);
  EXPECT_THROW(switchChannelsAllowed(), Error);
  setenv("LOOM_ENABLE_NVLS", "1", 1);
  setenv("NCCL_NVLS_ENABLE", "2", 1);
  EXPECT_THROW(switchChannelsAllowed(), Error);
}

TEST_F(SwitchChannelGuard, CreationIsRefusedWithTheReason) {
  setenv("LOOM_ENABLE_NVLS", "1", 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  auto outcomes = testing::runCommunicators(2, [](Communicator& comm) {
    try {
      SwitchChannel channel(comm, {0, 1}, 1 << 20, 1);
      ADD_FAILURE() << "a switch channel was created";
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
      EXPECT_NE(std::string(error.what()).find("switch channel refused: NCCL_NVLS_ENABLE=0"), std::string::npos)
          << error.what();
    }
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok) << outcome.message;
}

}  // namespace
}  // namespace loom
