// Installed bundled plans: gzip plan files, the installer (NAME.json.gz, .index, .installed) and the
// registry that registers the plans from the index and decodes each on its first selection.

#include "loom/default_plans.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gzip.hpp"
#include "loom/cache_dir.hpp"
#include "loom/error.hpp"
#include "loom/plan_registry.hpp"
#include "plan_index.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

const fs::path kBundledPlans = fs::path(LOOM_SOURCE_DIR) / "plans" / "default";
// Two all-reduces of 2 ranks that cover 0 to 23170 bytes between them, and an all-gather.
const std::vector<std::string> kSomePlans = {"allreduce_allpairs_packet_2r_0_5793.json",
                                             "allreduce_allpairs_packet_2r_5794_23170.json",
                                             "allgather_fullmesh_2r_185365_370728.json"};

std::string readAll(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

void writeAll(const fs::path& path, std::string_view bytes) { std::ofstream(path, std::ios::binary) << bytes; }

SelectionRequest allReduce(uint64_t bytes) {
  SelectionRequest request;
  request.collective = Collective::kAllReduce;
  request.messageBytes = bytes;
  request.worldSize = 2;
  request.ranksPerNode = 2;
  return request;
}

// A folder of its own per test (ctest runs them in parallel), a bundled folder of a few plans in it,
// and LOOM_CACHE_DIR naming a root beside them.
class DefaultPlans : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "loom_default_plans_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    folder_ = pattern;
    bundled_ = folder_ / "bundled";
    fs::create_directories(bundled_);
    for (const std::string& name : kSomePlans) fs::copy_file(kBundledPlans / name, bundled_ / name);
    target_ = folder_ / "root" / "default";
    if (const char* old = std::getenv("LOOM_CACHE_DIR")) saved_ = old;
    setenv("LOOM_CACHE_DIR", (folder_ / "root").c_str(), 1);
  }
  void TearDown() override {
    if (saved_) {
      setenv("LOOM_CACHE_DIR", saved_->c_str(), 1);
    } else {
      unsetenv("LOOM_CACHE_DIR");
    }
    fs::remove_all(folder_);
  }
  fs::path installed(const std::string& name) const { return target_ / (name + ".gz"); }

  fs::path folder_, bundled_, target_;
  std::optional<std::string> saved_;
};

TEST(Gzip, RoundTripAndMagic) {
  const std::string json = readAll(kBundledPlans / kSomePlans[0]);
  const std::string packed = gzipCompress(json);
  EXPECT_TRUE(isGzip(packed));
  EXPECT_FALSE(isGzip(json));
  EXPECT_LT(packed.size(), json.size() / 5);
  EXPECT_EQ(packed, gzipCompress(json));  // reproducible: header time 0
  EXPECT_EQ(packed.substr(4, 4), std::string(4, '\0'));
  EXPECT_EQ(gzipDecompress(packed, json.size(), "x"), json);
  EXPECT_EQ(gzipDecompress(packed + gzipCompress("tail"), json.size() + 4, "x"), json + "tail");  // two members
  EXPECT_EQ(gzipDecompress(gzipCompress(""), 0, "x"), "");
}

TEST(Gzip, DamagedTruncatedAndOversizedStreamsNameTheirOrigin) {
  const std::string json = readAll(kBundledPlans / kSomePlans[0]);
  std::string damaged = gzipCompress(json);
  for (size_t i = 10; i < 40; ++i) damaged[i] ^= 0x5a;
  const std::string packed = gzipCompress(json);
  const std::pair<std::string, std::string> cases[] = {
      {damaged, "invalid gzip data"},
      {packed.substr(0, packed.size() / 2), "truncated"},
      {packed, "over the limit of 100 bytes once decompressed"},
  };
  for (const auto& [bytes, words] : cases) {
    try {
      gzipDecompress(bytes, words.find("limit") != std::string::npos ? 100 : json.size(), "/some/plan.json.gz");
      ADD_FAILURE() << "no error for: " << words;
    } catch (const PlanError& e) {
      EXPECT_EQ(e.origin(), "/some/plan.json.gz");
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }
}

TEST_F(DefaultPlans, AGzipPlanFileLoadsAsTheSamePlanAndADamagedOneNamesTheFile) {
  const fs::path json = kBundledPlans / kSomePlans[0];
  const fs::path packed = folder_ / "plan.json.gz";
  writeAll(packed, gzipCompress(readAll(json)));
  const Plan a = Plan::load(json.string());
  const Plan b = Plan::load(packed.string());
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.contentHash, b.contentHash);  // the hash of the JSON: ranks agree whichever form they read
  EXPECT_EQ(summarize(a).opsByType, summarize(b).opsByType);

  std::string bytes = readAll(packed);
  bytes.resize(bytes.size() - 20);
  writeAll(packed, bytes);
  try {
    Plan::load(packed.string());
    ADD_FAILURE() << "a truncated gzip plan loaded";
  } catch (const PlanError& e) {
    EXPECT_EQ(e.origin(), packed.string());
    EXPECT_NE(std::string(e.what()).find(packed.string()), std::string::npos) << e.what();
  }
}

TEST_F(DefaultPlans, InstallWritesCompressedPlansTheIndexAndTheStampOnce) {
  EXPECT_TRUE(ensureDefaultPlansInstalled(bundled_.string(), target_.string()));
  EXPECT_FALSE(ensureDefaultPlansInstalled(bundled_.string(), target_.string()));
  for (const std::string& name : kSomePlans) {
    EXPECT_EQ(gzipDecompress(readAll(installed(name)), 64 << 20, name), readAll(bundled_ / name));
  }
  const std::string stamp = readAll(target_ / kInstalledStampName);
  EXPECT_EQ(stamp, installedStamp(bundled_.string()));
  EXPECT_EQ(stamp.rfind("loom ", 0), 0u);
  // Each plan by its installed name and its JSON's size, so the same plans bundled gzipped stamp alike.
  EXPECT_NE(stamp.find("\n" + kSomePlans[1] + ".gz " + std::to_string(fs::file_size(bundled_ / kSomePlans[1])) + "\n"),
            std::string::npos)
      << stamp;
  const fs::path packed = target_.parent_path() / "packed";
  fs::create_directories(packed);
  for (const std::string& name : kSomePlans) writeAll(packed / (name + ".gz"), gzipCompress(readAll(bundled_ / name)));
  EXPECT_EQ(installedStamp(packed.string()), stamp);

  const std::vector<PlanIndexEntry> index = readPlanIndex((target_ / kPlanIndexName).string());
  ASSERT_EQ(index.size(), kSomePlans.size());
  for (const PlanIndexEntry& entry : index) {
    EXPECT_EQ(entry.fileBytes, fs::file_size(target_ / entry.file));
    const Plan plan = Plan::load((target_ / entry.file).string());
    EXPECT_EQ(planInfoMismatch(entry.info, plan), "") << entry.file;
  }

  // A bundled plan less: the stamp differs, so the folder is installed again and the plan it installed
  // before goes; a plan the user put there stays.
  fs::remove(bundled_ / kSomePlans[2]);
  writeAll(target_ / "allreduce_of_the_user.json", "{}");
  EXPECT_TRUE(ensureDefaultPlansInstalled(bundled_.string(), target_.string()));
  EXPECT_FALSE(fs::exists(installed(kSomePlans[2])));
  EXPECT_TRUE(fs::exists(target_ / "allreduce_of_the_user.json"));
  EXPECT_EQ(readPlanIndex((target_ / kPlanIndexName).string()).size(), 2u);
}

TEST_F(DefaultPlans, TheRegistryDecodesAnIndexedPlanOnItsFirstSelection) {
  installDefaultPlans(bundled_.string(), target_.string());
  PlanRegistry registry;
  EXPECT_TRUE(registry.ensureDefaultPlansLoaded().empty());
  ASSERT_EQ(registry.list().size(), kSomePlans.size());
  const PlanEntry small = registry.find("allreduce_allpairs_packet_2r_0_5793");
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->path(), installed(kSomePlans[0]).string());  // deferred: registered from the index
  EXPECT_EQ(small->info.source, PlanSource::kBundled);
  EXPECT_EQ(small->info.maxMessageBytes, 5793u);
  EXPECT_EQ(small->info.reduceOp, ReduceOp::kSum);

  const std::shared_ptr<const Plan> chosen = registry.select(allReduce(4096));
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(chosen->name, "allreduce_allpairs_packet_2r_0_5793");
  EXPECT_EQ(chosen, small->plan());  // decoded once, then shared
  EXPECT_EQ(chosen->contentHash, Plan::load((bundled_ / kSomePlans[0]).string()).contentHash);
}

TEST_F(DefaultPlans, APlanThatFailsOnFirstUseIsReportedAndTheNextCandidateTaken) {
  // Two plans that fit 5000 bytes: the narrower one is damaged after the install, at its installed size.
  fs::copy_file(kBundledPlans / "allreduce_allpairs_packet_2r_0_5793.json", bundled_ / "wide.json");
  std::string wide = readAll(bundled_ / "wide.json");
  const std::string from = "\"name\": \"allreduce_allpairs_packet_2r_0_5793\"";
  ASSERT_NE(wide.find(from), std::string::npos);
  wide.replace(wide.find(from), from.size(), "\"name\": \"wide\"");
  const std::string range = "\"max_message_bytes\": 5793";
  ASSERT_NE(wide.find(range), std::string::npos);
  wide.replace(wide.find(range), range.size(), "\"max_message_bytes\": 9999");
  writeAll(bundled_ / "wide.json", wide);
  installDefaultPlans(bundled_.string(), target_.string());
  std::string damaged = readAll(installed(kSomePlans[0]));
  for (size_t i = 12; i < 60; ++i) damaged[i] ^= 0x33;
  writeAll(installed(kSomePlans[0]), damaged);

  PlanRegistry registry;
  EXPECT_TRUE(registry.ensureDefaultPlansLoaded().empty());  // the index still lists it at its size
  testing::internal::CaptureStderr();
  EXPECT_EQ(registry.select(allReduce(5000))->name, "wide");
  const std::string report = testing::internal::GetCapturedStderr();
  EXPECT_NE(report.find("skipped bundled plan"), std::string::npos) << report;
  EXPECT_NE(report.find(installed(kSomePlans[0]).string()), std::string::npos) << report;
  EXPECT_EQ(registry.find("allreduce_allpairs_packet_2r_0_5793"), nullptr);  // left out from now on
}

TEST_F(DefaultPlans, AFileThatNoLongerMatchesItsIndexEntryIsNotRun) {
  installDefaultPlans(bundled_.string(), target_.string());
  // The index says 0..4000 bytes where the plan says 0..5793: the plan is refused when first used.
  std::string index = readAll(target_ / kPlanIndexName);
  const std::string from = "\"max_message_bytes\": 5793";
  ASSERT_NE(index.find(from), std::string::npos);
  index.replace(index.find(from), from.size(), "\"max_message_bytes\": 4000");
  writeAll(target_ / kPlanIndexName, index);
  PlanRegistry registry;
  registry.ensureDefaultPlansLoaded();
  const PlanEntry entry = registry.find("allreduce_allpairs_packet_2r_0_5793");
  ASSERT_NE(entry, nullptr);
  try {
    entry->plan();
    ADD_FAILURE() << "a plan that does not match its index entry was decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(installed(kSomePlans[0]).string() + ": its max_message_bytes"),
              std::string::npos)
        << e.what();
  }

  // A file of another size than the index says is decoded when the folder loads, and refused: its text is not
  // what the installer wrote (here one more line). A damaged index: every plan decoded.
  writeAll(installed(kSomePlans[1]), readAll(installed(kSomePlans[1])) + gzipCompress("\n"));
  PlanRegistry again;
  const std::vector<std::string> refused = again.ensureDefaultPlansLoaded();
  EXPECT_EQ(again.find("allreduce_allpairs_packet_2r_5794_23170"), nullptr);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].find("its text is not what the installer wrote"), std::string::npos) << refused[0];
  // A plan file the installer did not write, in the folder of bundled plans: not registered.
  writeAll(target_ / "planted.json", readAll(kBundledPlans / kSomePlans[0]));
  PlanRegistry planted;
  const std::vector<std::string> notListed = planted.ensureDefaultPlansLoaded();
  bool named = false;
  for (const std::string& line : notListed) named |= line.find("planted.json: not a plan the installer wrote") != std::string::npos;
  EXPECT_TRUE(named);
  fs::remove(target_ / "planted.json");
  writeAll(target_ / kPlanIndexName, "{\"format\": 3, \"plans\": [{\"file\": 3}]}");
  PlanRegistry third;
  const std::vector<std::string> skipped = third.ensureDefaultPlansLoaded();
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find((target_ / kPlanIndexName).string() + "' at plans[0]"), std::string::npos) << skipped[0];
  EXPECT_EQ(third.list().size(), kSomePlans.size());
  EXPECT_EQ(third.find("allreduce_allpairs_packet_2r_0_5793")->path(), "");
}

TEST_F(DefaultPlans, NoBundledPlansIsAnErrorAndTheLibraryFindsTheCheckoutsPlans) {
  try {
    installDefaultPlans((folder_ / "empty").string(), target_.string());
    ADD_FAILURE() << "installed from a folder without plans";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no bundled plans"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fs::path(bundledPlansDirectory()), kBundledPlans);
}

}  // namespace
}  // namespace loom
