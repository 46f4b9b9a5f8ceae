// Subgroup bootstraps (runtime/bootstrap_split): ranks of a thread job split by color and key, or
// left out, and the subgroups then talk among themselves only.

#include "loom/bootstrap_split.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "bootstrap_test_util.hpp"

namespace loom {
namespace {

using testing::allRanks;
using testing::bytesOf;
using testing::runRanks;

constexpr int64_t kTimeoutMs = 10000;

struct Seen {
  int newRank = -2;
  int newSize = -2;
  std::vector<int> parentRanks;
  std::string gathered;  // the members' parent ranks, as each sent it over the subgroup's all-gather
};

TEST(BootstrapSplit, ColorsAndKeysMakeGroupsThatTalkAmongThemselves) {
  constexpr int kWorld = 6;
  // Colors that interleave, keys that reverse each group's order, and a rank in no group.
  const std::vector<int> colors = {1, 0, 1, 0, kSplitNoColor, 1};
  std::vector<Seen> seen(kWorld);
  const auto outcomes = runRanks(kWorld, UniqueId::create("127.0.0.1"), kTimeoutMs, allRanks(kWorld), [&](Bootstrap& parent) {
    const int rank = parent.rank();
    SubgroupBootstrap group = splitBootstrap(parent, colors[rank], -rank);
    if (!group.bootstrap) return;
    Seen& mine = seen[rank];
    mine.newRank = group.bootstrap->rank();
    mine.newSize = group.bootstrap->worldSize();
    mine.parentRanks = group.parentRanks;
    for (const auto& block : group.bootstrap->allGather(bytesOf(std::to_string(rank)))) {
      mine.gathered += std::string(block.begin(), block.end()) + " ";
    }
  });
  for (int rank = 0; rank < kWorld; ++rank) ASSERT_TRUE(outcomes[rank].ok) << outcomes[rank].message;
  EXPECT_EQ(seen[4].newRank, -2);  // NOCOLOR: no bootstrap
  EXPECT_EQ(seen[5].newRank, 0);
  EXPECT_EQ(seen[2].newRank, 1);
  EXPECT_EQ(seen[0].newRank, 2);
  EXPECT_EQ(seen[3].newRank, 0);
  EXPECT_EQ(seen[1].newRank, 1);
  EXPECT_EQ(seen[0].newSize, 3);
  EXPECT_EQ(seen[1].newSize, 2);
  EXPECT_EQ(seen[0].parentRanks, (std::vector<int>{5, 2, 0}));
  EXPECT_EQ(seen[0].gathered, "5 2 0 ");
  EXPECT_EQ(seen[3].gathered, "3 1 ");
}

TEST(BootstrapSplit, SubgroupLeavesRanksOutThatNeverCall) {
  constexpr int kWorld = 4;
  std::vector<Seen> seen(kWorld);
  const auto outcomes = runRanks(kWorld, UniqueId::create("127.0.0.1"), kTimeoutMs, allRanks(kWorld), [&](Bootstrap& parent) {
    if (parent.rank() == 2) return;  // left out: it takes no part
    SubgroupBootstrap group = subgroupBootstrap(parent, {0, 1, 3});
    seen[parent.rank()].newRank = group.bootstrap->rank();
    group.bootstrap->barrier();
  });
  for (int rank = 0; rank < kWorld; ++rank) ASSERT_TRUE(outcomes[rank].ok) << outcomes[rank].message;
  EXPECT_EQ(seen[3].newRank, 2);
  EXPECT_EQ(seen[1].newRank, 1);
}

TEST(BootstrapSplit, NegativeColorIsRefusedOnEveryRank) {
  constexpr int kWorld = 3;
  const auto outcomes = runRanks(kWorld, UniqueId::create("127.0.0.1"), kTimeoutMs, allRanks(kWorld), [&](Bootstrap& parent) {
    splitBootstrap(parent, parent.rank() == 1 ? -7 : 0, 0);
  });
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_FALSE(outcomes[rank].ok);
    EXPECT_EQ(outcomes[rank].category, ErrorCategory::kInvalidArgument);
    EXPECT_NE(outcomes[rank].message.find("rank 1 passed a negative color other than NOCOLOR (-1)"), std::string::npos)
        << outcomes[rank].message;
  }
}

TEST(BootstrapSplit, MembersMustHoldThisRank) {
  const auto outcomes = runRanks(2, UniqueId::create("127.0.0.1"), kTimeoutMs, allRanks(2), [&](Bootstrap& parent) {
    subgroupBootstrap(parent, {1 - parent.rank()});
  });
  EXPECT_NE(outcomes[0].message.find("rank 0 is not among the members"), std::string::npos) << outcomes[0].message;
}

}  // namespace
}  // namespace loom
