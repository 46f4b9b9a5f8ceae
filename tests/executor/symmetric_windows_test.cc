// The executor's table of symmetric windows: which window holds a buffer (all of it, or none), where
// windows overlap, and every rank's buffers of a call found from the windows alone.

#include "symmetric_windows.hpp"

#include <gtest/gtest.h>

namespace loom {
namespace {

SymmetricWindow window(uint64_t id, std::vector<uint64_t> bases, uint64_t bytes) {
  SymmetricWindow made;
  made.id = id;
  made.allocations.assign(bases.size(), 0);
  for (size_t r = 0; r < bases.size(); ++r) made.allocations[r] = 100 + r;
  made.bases = std::move(bases);
  made.bytes = bytes;
  return made;
}

const void* at(uint64_t address) { return reinterpret_cast<const void*>(address); }

TEST(SymmetricWindows, FindsTheWindowThatHoldsAllOfABuffer) {
  SymmetricWindows windows(1);  // this rank is rank 1: its bases are the second
  EXPECT_TRUE(windows.empty());
  windows.add(window(1, {0x1000, 0x9000}, 0x100));
  windows.add(window(2, {0x5000, 0x8000}, 0x200));
  EXPECT_EQ(windows.nextId(), 3u);
  const auto inFirst = windows.find(at(0x9010), 0xf0);
  ASSERT_TRUE(inFirst);
  EXPECT_EQ(inFirst->window->id, 1u);
  EXPECT_EQ(inFirst->offset, 0x10u);
  const auto inSecond = windows.find(at(0x8000), 0x200);
  ASSERT_TRUE(inSecond);
  EXPECT_EQ(inSecond->window->id, 2u);
  EXPECT_FALSE(windows.find(at(0x9010), 0xf1)) << "runs one byte past the window";
  EXPECT_FALSE(windows.find(at(0x7fff), 2)) << "starts before the window";
  EXPECT_FALSE(windows.find(at(0x1000), 16)) << "rank 0's base, not this rank's";
  EXPECT_FALSE(windows.find(at(0x9000), 0)) << "an empty buffer is in no window";
  EXPECT_TRUE(windows.overlaps(at(0x90f0), 0x100));
  EXPECT_FALSE(windows.overlaps(at(0x9100), 0x100));
  ASSERT_NE(windows.byId(2), nullptr);
  EXPECT_TRUE(windows.remove(2));
  EXPECT_FALSE(windows.remove(2));
  EXPECT_EQ(windows.byId(2), nullptr);
  EXPECT_FALSE(windows.find(at(0x8000), 1));
}

TEST(SymmetricWindows, EveryRanksBuffersComeFromTheWindowsAndThisRanksOffsets) {
  SymmetricWindows windows(0);
  windows.add(window(1, {0x1000, 0x9000, 0x3000}, 0x100));
  windows.add(window(2, {0x5000, 0x8000, 0x4000}, 0x400));
  const auto input = windows.find(at(0x1040), 0x20);
  const auto output = windows.find(at(0x5100), 0x60);
  ASSERT_TRUE(input && output);
  const std::vector<RankBuffers> everyRank = windowedBuffers(*input, *output);
  ASSERT_EQ(everyRank.size(), 3u);
  EXPECT_EQ(everyRank[1].input, 0x9040u);
  EXPECT_EQ(everyRank[2].output, 0x4100u);
  EXPECT_EQ(everyRank[2].inputAllocation, 102u);
  EXPECT_EQ(everyRank[0].inputBytes, 0xc0u) << "what is left of the window past the offset";
  EXPECT_EQ(everyRank[0].outputBytes, 0x300u);
  EXPECT_EQ(everyRank[1].inputWindow, 1u);
  EXPECT_EQ(everyRank[1].outputWindow, 2u);
}

}  // namespace
}  // namespace loom
