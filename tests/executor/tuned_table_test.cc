// A machine's tuned table (tuned_table.hpp): found for its machine only, its plans registered as kTuned for
// the rows' sizes, ranked after the user's plans and before the bundled ones; a damaged table names its
// JSON path, and a plan file behind a symbolic link is not read.

#include "loom/tuned_table.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "loom/error.hpp"
#include "loom/plan_registry.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

const fs::path kExample = fs::path(LOOM_SOURCE_DIR) / "examples" / "plans" / "allreduce_2r_simple.json";

class TunedTable : public ::testing::Test {
 protected:
  void SetUp() override {
    char folder[] = "/tmp/loom_tuned_XXXXXX";
    ASSERT_NE(mkdtemp(folder), nullptr);
    root_ = folder;
    fs::create_directories(root_ / "cpu_w2_r2");
    fs::copy_file(kExample, root_ / "cpu_w2_r2" / "fast.json");
  }
  void TearDown() override { fs::remove_all(root_); }

  void writeTable(const std::string& machine, const std::string& rows) {
    std::ofstream(root_ / "cpu_w2_r2.json") << R"({"format": 1, "key": "cpu_w2_r2", "machine": )" << machine
                                            << R"(, "rows": )" << rows << "}";
  }
  static std::string cpuMachine() {
    return R"({"backend": "cpu", "gpu": "", "gpus": 0, "world_size": 2, "ranks_per_node": 2})";
  }

  fs::path root_;
};

TEST_F(TunedTable, ItsPlansServeTheRowsSizesAfterTheUsersAndBeforeTheBundled) {
  writeTable(cpuMachine(), R"([{"collective": "allreduce", "min_bytes": 4096, "max_bytes": 65536, "plan": "fast.json"}])");
  const TunedMachine machine{"cpu", "", 0, 2, 2};
  EXPECT_EQ(findTunedTable(root_.string(), machine), (root_ / "cpu_w2_r2.json").string());
  EXPECT_EQ(findTunedTable(root_.string(), TunedMachine{"gpu", "NVIDIA H200", 1, 2, 2}), "");
  EXPECT_EQ(findTunedTable(root_.string(), TunedMachine{"cpu", "", 0, 4, 4}), "");

  PlanRegistry registry;
  Plan bundled = Plan::load(kExample.string());
  bundled.name = "bundled_one";
  auto shared = std::make_shared<const Plan>(bundled);
  registry.add(shared, planInfoFrom(*shared, PlanSource::kBundled));
  EXPECT_TRUE(registry.loadTunedTable((root_ / "cpu_w2_r2.json").string()).empty());
  const PlanEntry tuned = registry.find("allreduce_2r_simple");
  ASSERT_NE(tuned, nullptr);
  EXPECT_EQ(tuned->info.source, PlanSource::kTuned);
  EXPECT_EQ(planSourceName(tuned->info.source), "tuned");
  EXPECT_EQ(tuned->info.minMessageBytes, 4096u);
  EXPECT_EQ(tuned->info.maxMessageBytes, 65536u);

  SelectionRequest request;
  request.collective = Collective::kAllReduce;
  request.worldSize = 2;
  request.ranksPerNode = 2;
  request.messageBytes = 8192;
  EXPECT_EQ(registry.select(request)->name, "allreduce_2r_simple");  // the tuned one, before the bundled
  request.messageBytes = 1 << 20;
  EXPECT_EQ(registry.select(request)->name, "bundled_one");  // outside every row: the bundled table's
  Plan mine = bundled;
  mine.name = "mine";
  auto user = std::make_shared<const Plan>(mine);
  registry.add(user, planInfoFrom(*user, PlanSource::kUser));
  request.messageBytes = 8192;
  EXPECT_EQ(registry.select(request)->name, "mine");  // the user's plans come first
}

TEST_F(TunedTable, ADamagedTableNamesItsJsonPathAndALinkedPlanIsNotRead) {
  writeTable(cpuMachine(), R"([{"collective": "allreduce", "min_bytes": 4096, "max_bytes": 64, "plan": "fast.json"}])");
  try {
    readTunedTable((root_ / "cpu_w2_r2.json").string());
    FAIL() << "a row whose range is upside down was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at $.rows[0]: min_bytes is above max_bytes"), std::string::npos) << e.what();
  }
  writeTable(cpuMachine(), R"([{"collective": "allreduce", "min_bytes": 0, "max_bytes": 64, "plan": "../fast.json"}])");
  EXPECT_THROW(readTunedTable((root_ / "cpu_w2_r2.json").string()), Error);

  fs::rename(root_ / "cpu_w2_r2" / "fast.json", root_ / "elsewhere.json");
  fs::create_symlink(root_ / "elsewhere.json", root_ / "cpu_w2_r2" / "fast.json");
  writeTable(cpuMachine(), R"([{"collective": "allreduce", "min_bytes": 0, "max_bytes": 64, "plan": "fast.json"}])");
  PlanRegistry registry;
  const std::vector<std::string> skipped = registry.loadTunedTable((root_ / "cpu_w2_r2.json").string());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("not a regular file"), std::string::npos) << skipped[0];
  EXPECT_TRUE(registry.list().empty());
}

}  // namespace
}  // namespace loom
