// The plan registry and the default selector: fitting, ranking, caching, custom selectors, the
// no-plan error, and loading bundled plans from <LOOM_CACHE_DIR>/default.

#include "loom/plan_registry.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "loom/cache_dir.hpp"
#include "loom/error.hpp"

namespace loom {
namespace {

const std::string kExamplePlan = std::string(LOOM_SOURCE_DIR) + "/examples/plans/allreduce_2r_simple.json";

// The example all-reduce (2 ranks, 1 KiB to 1 GiB) under another name and size range.
std::shared_ptr<const Plan> examplePlan(const std::string& name, uint64_t minBytes = 1024,
                                        uint64_t maxBytes = uint64_t(1) << 30) {
  static const Plan base = Plan::load(kExamplePlan);
  Plan plan = base;
  plan.name = name;
  plan.minMessageBytes = minBytes;
  plan.maxMessageBytes = maxBytes;
  return std::make_shared<const Plan>(std::move(plan));
}

PlanEntry add(PlanRegistry& registry, const std::string& name, uint64_t minBytes, uint64_t maxBytes,
              PlanSource source = PlanSource::kUser, int32_t priority = 0) {
  auto plan = examplePlan(name, minBytes, maxBytes);
  PlanInfo info = planInfoFrom(*plan, source);
  info.priority = priority;
  return registry.add(plan, info);
}

SelectionRequest allReduce(uint64_t bytes, DataType type = DataType::kFloat32) {
  SelectionRequest request;
  request.collective = Collective::kAllReduce;
  request.messageBytes = bytes;
  request.dataType = type;
  request.worldSize = 2;
  request.ranksPerNode = 2;
  return request;
}

std::string nameOf(const std::shared_ptr<const Plan>& plan) { return plan ? plan->name : "<none>"; }

TEST(PlanRegistry, AddFindListRemove) {
  PlanRegistry registry;
  add(registry, "a", 1024, 4096);
  add(registry, "b", 1024, 1 << 20);
  EXPECT_EQ(registry.find("a")->info.maxMessageBytes, 4096u);
  EXPECT_EQ(registry.find("missing"), nullptr);
  ASSERT_EQ(registry.list().size(), 2u);
  EXPECT_EQ(registry.list()[0]->info.name, "a");  // the narrower range first
  EXPECT_TRUE(registry.remove("a"));
  EXPECT_FALSE(registry.remove("a"));
  ASSERT_EQ(registry.list().size(), 1u);
}

TEST(PlanRegistry, DuplicateNameIsAnErrorUnlessReplacing) {
  PlanRegistry registry;
  add(registry, "a", 1024, 4096);
  try {
    add(registry, "a", 1024, 8192);
    FAIL() << "a second 'a' was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'a' is registered already"), std::string::npos) << e.what();
  }
  auto plan = examplePlan("a", 1024, 8192);
  registry.add(plan, planInfoFrom(*plan), /*replace=*/true);
  EXPECT_EQ(registry.find("a")->info.maxMessageBytes, 8192u);
}

TEST(PlanRegistry, RangeCannotReachOutsideThePlan) {
  PlanRegistry registry;
  auto plan = examplePlan("a", 1024, 4096);
  PlanInfo info = planInfoFrom(*plan);
  info.maxMessageBytes = 8192;
  EXPECT_THROW(registry.add(plan, info), Error);
  info.minMessageBytes = 2048;
  info.maxMessageBytes = 3072;  // narrowing is fine
  EXPECT_NO_THROW(registry.add(plan, info));
}

TEST(PlanFits, ChecksEveryField) {
  auto plan = examplePlan("a", 1024, 4096);
  PlanInfo info = planInfoFrom(*plan);
  EXPECT_TRUE(planFits(info, allReduce(1024)));
  EXPECT_TRUE(planFits(info, allReduce(4096)));
  EXPECT_FALSE(planFits(info, allReduce(1023)));
  EXPECT_FALSE(planFits(info, allReduce(4097)));
  SelectionRequest other = allReduce(2048);
  other.worldSize = 4;
  EXPECT_FALSE(planFits(info, other));
  other = allReduce(2048);
  other.inplace = true;
  EXPECT_FALSE(planFits(info, other));
  other = allReduce(2048);
  other.collective = Collective::kAllGather;
  EXPECT_FALSE(planFits(info, other));

  info.dataTypes = {DataType::kBFloat16};
  EXPECT_FALSE(planFits(info, allReduce(2048)));
  EXPECT_TRUE(planFits(info, allReduce(2048, DataType::kBFloat16)));

  info.tags = {"fast", "nvlink"};
  SelectionRequest tagged = allReduce(2048, DataType::kBFloat16);
  tagged.tags = {"nvlink"};
  EXPECT_TRUE(planFits(info, tagged));
  tagged.tags = {"nvlink", "ib"};
  EXPECT_FALSE(planFits(info, tagged));
}

TEST(DefaultSelector, UserBeforeBundledThenNarrowestThenPriorityThenEarliest) {
  PlanRegistry registry;
  add(registry, "bundled_narrow", 1024, 2048, PlanSource::kBundled);
  add(registry, "user_wide", 1024, 1 << 20);
  EXPECT_EQ(nameOf(registry.select(allReduce(2048))), "user_wide");  // user plans first
  add(registry, "user_narrow", 1024, 65536);
  EXPECT_EQ(nameOf(registry.select(allReduce(2048))), "user_narrow");
  add(registry, "user_narrow_priority", 2048, 66560, PlanSource::kUser, 5);  // as narrow, higher priority
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "user_narrow_priority");
  add(registry, "user_narrow_priority_later", 4096, 68608, PlanSource::kUser, 5);
  EXPECT_EQ(nameOf(registry.select(allReduce(8192))), "user_narrow_priority");  // the earlier of equals
  EXPECT_EQ(nameOf(registry.select(allReduce(1 << 20))), "user_wide");
  EXPECT_EQ(registry.select(allReduce(uint64_t(1) << 31)), nullptr);  // nothing that large
}

TEST(Selection, IsCachedAndChangesInvalidateTheCache) {
  PlanRegistry registry;
  add(registry, "wide", 1024, 1 << 20);
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "wide");
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "wide");
  EXPECT_EQ(registry.stats().selections, 2u);
  EXPECT_EQ(registry.stats().cacheHits, 1u);
  add(registry, "narrow", 1024, 8192);  // a new plan: the cached answer would be stale
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "narrow");
  registry.remove("narrow");
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "wide");
}

TEST(Selection, APlanFitsOnlyCallsOfItsReductionOperator) {
  PlanRegistry registry;
  const PlanEntry summing = add(registry, "sum", 1024, 1 << 20);
  ASSERT_TRUE(summing->info.reduceOp.has_value());
  EXPECT_EQ(*summing->info.reduceOp, ReduceOp::kSum);
  SelectionRequest max = allReduce(4096);
  max.op = ReduceOp::kMax;
  EXPECT_EQ(registry.select(max), nullptr);  // cached apart from the sum request below
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "sum");
  auto maxPlan = std::make_shared<Plan>(*examplePlan("max"));
  for (GpuProgram& gpu : maxPlan->gpus) {
    for (ThreadBlock& tb : gpu.threadblocks) {
      for (Op& op : tb.ops) {
        if (op.reduceOp) op.reduceOp = ReduceOp::kMax;
      }
    }
  }
  registry.add(maxPlan, planInfoFrom(*maxPlan));
  EXPECT_EQ(nameOf(registry.select(max)), "max");
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "sum");
}

TEST(Selection, CustomSelectorSeesTheCandidatesOncePerKey) {
  PlanRegistry registry;
  add(registry, "wide", 1024, 1 << 20);
  add(registry, "narrow", 1024, 8192);
  int calls = 0;
  std::vector<std::string> seen;
  registry.setSelector([&](const SelectionRequest& request) -> std::shared_ptr<const Plan> {
    ++calls;
    seen.clear();
    for (const PlanEntry& entry : request.candidates) seen.push_back(entry->info.name);
    return request.messageBytes == 2048 ? nullptr : request.candidates.back()->plan();  // the widest
  });
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "wide");
  EXPECT_EQ(seen, (std::vector<std::string>{"narrow", "wide"}));
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "wide");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(registry.select(allReduce(2048)), nullptr);  // the selector may decline
  EXPECT_EQ(calls, 2);
  SelectionRequest capturing = allReduce(4096);
  capturing.capturing = true;  // another key: the selector may choose differently under capture
  registry.select(capturing);
  EXPECT_EQ(calls, 3);
  registry.setSelector(nullptr);
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "narrow");
}

TEST(Selection, NoPlanErrorSaysWhatWasAskedAndWhatIsThere) {
  PlanRegistry registry;
  add(registry, "small", 1024, 4096);
  try {
    registry.selectOrThrow(allReduce(1 << 20, DataType::kBFloat16));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string text = e.what();
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(text.find("no plan for allreduce of 1048576 bytes (bfloat16, sum, out of place) over 2 ranks"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("small (user): 2 per node, bytes 1024..4096"), std::string::npos) << text;
  }
}

// A plan whose busiest rank has `blocks` thread blocks (the example's rank 1 gets them; rank 0 keeps one).
PlanEntry addWithBlocks(PlanRegistry& registry, const std::string& name, uint32_t blocks, uint64_t maxBytes,
                        PlanSource source = PlanSource::kUser) {
  Plan plan = *examplePlan(name, 0, maxBytes);
  plan.gpus[1].threadblocks.resize(blocks, plan.gpus[1].threadblocks[0]);
  auto shared = std::make_shared<const Plan>(std::move(plan));
  return registry.add(shared, planInfoFrom(*shared, source));
}

TEST(Selection, PlansWhoseBlocksDoNotFitThePlacementArePassedOver) {
  PlanRegistry registry;
  EXPECT_EQ(addWithBlocks(registry, "wide", 40, 4096)->info.threadBlocks, 40u);  // narrowest: first when it fits
  addWithBlocks(registry, "narrow", 8, 1 << 20);
  SelectionRequest request = allReduce(2048);
  EXPECT_EQ(nameOf(registry.select(request)), "wide");  // no placement: no limit
  request.placement = Placement{4, 131};                 // 4 ranks on a GPU of 132 multiprocessors: 32 each
  EXPECT_EQ(request.placement.threadBlocksPerRank(), 32u);
  EXPECT_EQ(nameOf(registry.select(request)), "narrow");
  const std::vector<PlanEntry> passed = registry.passedOver(request);
  ASSERT_EQ(passed.size(), 1u);
  EXPECT_EQ(passed[0]->info.name, "wide");
  EXPECT_EQ(placementShortfall(passed[0]->info, request.placement),
            "40 thread blocks per rank, but 4 ranks sharing the GPU may run at most 32 each (the GPU holds 131 "
            "interpreter blocks at once)");
  EXPECT_EQ(placementShortfall(registry.find("narrow")->info, request.placement), "");
  request.placement = Placement{40, 131};  // 3 blocks each: neither fits, and the error says why
  EXPECT_EQ(registry.select(request), nullptr);
  try {
    registry.selectOrThrow(request);
    FAIL() << "a plan that does not fit was selected";
  } catch (const Error& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("Passed over 'narrow': 8 thread blocks per rank, but 40 ranks sharing the GPU may run at most 3"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("Passed over 'wide'"), std::string::npos) << text;
  }
  // The selection cache keys on the placement: the same call elsewhere is selected anew.
  request.placement = Placement{1, 131};
  EXPECT_EQ(nameOf(registry.select(request)), "wide");
}

TEST(Selection, ConcurrentSelectAndRegister) {
  PlanRegistry registry;
  add(registry, "wide", 0, uint64_t(1) << 30);
  std::atomic<bool> wrong{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        if (!registry.select(allReduce(1024 + 16 * ((i + t) % 64)))) wrong = true;
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 50; ++i) {
      add(registry, "extra" + std::to_string(i), 1024, 1 << 20);
      registry.remove("extra" + std::to_string(i));
    }
  });
  for (auto& thread : threads) thread.join();
  EXPECT_FALSE(wrong);
}

class CacheRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("loom_registry_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "default");
    const char* old = std::getenv("LOOM_CACHE_DIR");
    if (old != nullptr) saved_ = old;
    setenv("LOOM_CACHE_DIR", root_.c_str(), 1);
  }
  void TearDown() override {
    if (saved_) {
      setenv("LOOM_CACHE_DIR", saved_->c_str(), 1);
    } else {
      unsetenv("LOOM_CACHE_DIR");
    }
    std::filesystem::remove_all(root_);
  }
  std::filesystem::path root_;
  std::optional<std::string> saved_;
};

TEST_F(CacheRoot, LoomCacheDirNamesTheRoot) {
  EXPECT_EQ(cacheRoot(), root_.string());
  EXPECT_EQ(defaultPlansDirectory(), (root_ / "default").string());
}

TEST_F(CacheRoot, BundledPlansLoadFromTheDefaultFolderAndBadFilesAreReported) {
  std::filesystem::copy_file(kExamplePlan, root_ / "default" / "allreduce_2r_simple.json");
  std::ofstream(root_ / "default" / "broken.json") << "{ not json";
  std::ofstream(root_ / "default" / "notes.txt") << "not a plan";
  PlanRegistry registry;
  const std::vector<std::string> skipped = registry.ensureDefaultPlansLoaded();
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("broken.json"), std::string::npos) << skipped[0];
  ASSERT_NE(registry.find("allreduce_2r_simple"), nullptr);
  EXPECT_EQ(registry.find("allreduce_2r_simple")->info.source, PlanSource::kBundled);
  EXPECT_EQ(nameOf(registry.select(allReduce(4096))), "allreduce_2r_simple");

  // Another root: its plans replace the bundled ones of the first; user plans stay.
  add(registry, "mine", 1024, 2048);
  const std::filesystem::path other = root_ / "other";
  std::filesystem::create_directories(other / "default");
  setenv("LOOM_CACHE_DIR", other.c_str(), 1);
  EXPECT_TRUE(registry.ensureDefaultPlansLoaded().empty());
  EXPECT_EQ(registry.find("allreduce_2r_simple"), nullptr);
  EXPECT_NE(registry.find("mine"), nullptr);
}

TEST_F(CacheRoot, LoomDefaultPlansZeroTurnsTheBundledPlansOff) {
  std::filesystem::copy_file(kExamplePlan, root_ / "default" / "allreduce_2r_simple.json");
  PlanRegistry registry;
  registry.ensureDefaultPlansLoaded();
  ASSERT_NE(registry.find("allreduce_2r_simple"), nullptr);
  setenv("LOOM_DEFAULT_PLANS", "0", 1);
  EXPECT_FALSE(defaultPlansEnabled());
  EXPECT_TRUE(registry.ensureDefaultPlansLoaded().empty());
  EXPECT_EQ(registry.find("allreduce_2r_simple"), nullptr);
  setenv("LOOM_DEFAULT_PLANS", "on", 1);
  EXPECT_TRUE(defaultPlansEnabled());
  registry.ensureDefaultPlansLoaded();
  EXPECT_NE(registry.find("allreduce_2r_simple"), nullptr);
  setenv("LOOM_DEFAULT_PLANS", "maybe", 1);
  try {
    defaultPlansEnabled();
    ADD_FAILURE() << "LOOM_DEFAULT_PLANS=maybe was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("LOOM_DEFAULT_PLANS: expected 1/0"), std::string::npos) << error.what();
  }
  unsetenv("LOOM_DEFAULT_PLANS");
}

}  // namespace
}  // namespace loom
