// Every file of tests/data/plans/malformed is refused by Plan::load with the JSON path and message
// that expected.tsv gives for it; so are a plan past the size limit and a document nested too deeply,
// which are generated here rather than committed.

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/plan.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(LOOM_SOURCE_DIR) / "tests" / "data" / "plans" / "malformed";
const fs::path kExample = fs::path(LOOM_SOURCE_DIR) / "examples" / "plans" / "allreduce_2r_simple.json";

struct Expectation {
  std::string file;
  std::string jsonPath;
  std::string detail;  // a substring of PlanError::detail()
};

// Names the case in test output instead of dumping its bytes.
void PrintTo(const Expectation& e, std::ostream* out) { *out << e.file; }

// expected.tsv: FILE<TAB>JSON_PATH<TAB>MESSAGE_SUBSTRING; blank lines and lines starting with '#' are skipped.
std::vector<Expectation> readExpectations() {
  std::ifstream in(kCorpus / "expected.tsv");
  std::vector<Expectation> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t first = line.find('\t');
    const size_t second = first == std::string::npos ? first : line.find('\t', first + 1);
    if (second == std::string::npos || line.find('\t', second + 1) != std::string::npos) {
      // Runs before main(): keep the line as a case that fails, naming the problem.
      out.push_back({line, "<expected.tsv: not three tab-separated fields>", ""});
      continue;
    }
    out.push_back({line.substr(0, first), line.substr(first + 1, second - first - 1), line.substr(second + 1)});
  }
  return out;
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Sets an environment variable for one scope and restores what was there before.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class MalformedPlanTest : public testing::TestWithParam<Expectation> {};

TEST_P(MalformedPlanTest, IsRefusedWithExpectedPathAndDetail) {
  const Expectation& expected = GetParam();
  const std::string path = (kCorpus / expected.file).string();
  try {
    Plan::load(path);
    FAIL() << expected.file << " was accepted";
  } catch (const PlanError& error) {
    EXPECT_EQ(error.jsonPath(), expected.jsonPath) << error.what();
    EXPECT_NE(error.detail().find(expected.detail), std::string::npos)
        << "detail \"" << error.detail() << "\" lacks \"" << expected.detail << "\"";
    EXPECT_EQ(error.origin(), path);
    EXPECT_EQ(error.category(), ErrorCategory::kInvalidPlan);
  }
}

std::string testName(const testing::TestParamInfo<Expectation>& info) {
  std::string name = info.param.file.substr(0, info.param.file.rfind('.'));
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Corpus, MalformedPlanTest, testing::ValuesIn(readExpectations()), testName);

TEST(MalformedCorpusTest, EveryFileIsListedOnceAndEveryListedFileExists) {
  std::multiset<std::string> listed;
  for (const Expectation& e : readExpectations()) listed.insert(e.file);
  std::set<std::string> present;
  for (const fs::directory_entry& entry : fs::directory_iterator(kCorpus)) {
    const std::string name = entry.path().filename().string();
    if (name != "expected.tsv") present.insert(name);
  }
  for (const std::string& name : present)
    EXPECT_EQ(listed.count(name), 1u) << name << " is not listed once in expected.tsv";
  for (const std::string& name : listed) EXPECT_EQ(present.count(name), 1u) << name << " is listed but missing";
  EXPECT_GE(present.size(), 32u);
}

// A plan made large by trailing whitespace: everything but its size is fine. The file is named after
// the running test, since ctest -j runs tests side by side.
fs::path writeOversizedPlan(size_t bytes) {
  const std::string test = testing::UnitTest::GetInstance()->current_test_info()->name();
  const fs::path path = fs::path(testing::TempDir()) / ("loom_" + test + ".json");
  std::string text = readFile(kExample);
  text.resize(bytes, ' ');
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(PlanSizeLimitTest, FiftyMegabyteFileIsRefusedBeforeParsing) {
  const fs::path path = writeOversizedPlan(50u << 20);
  try {
    Plan::load(path.string());
    FAIL() << "a 50 MB plan was accepted";
  } catch (const PlanError& error) {
    EXPECT_EQ(error.jsonPath(), "$");
    EXPECT_EQ(error.detail(),
              "the plan is 52428800 bytes, over the limit of 33554432 bytes (LOOM_MAX_PLAN_BYTES raises it)");
  }
  fs::remove(path);
}

TEST(PlanSizeLimitTest, FiftyMegabyteTextIsRefusedByParse) {
  std::string text = readFile(kExample);
  text.resize(50u << 20, ' ');
  try {
    Plan::parse(text);
    FAIL() << "a 50 MB plan was accepted";
  } catch (const PlanError& error) {
    EXPECT_EQ(error.jsonPath(), "$");
    EXPECT_NE(error.detail().find("over the limit of 33554432 bytes"), std::string::npos) << error.detail();
    EXPECT_EQ(error.origin(), "<memory>");
  }
}

TEST(PlanSizeLimitTest, EnvironmentVariableMovesTheLimit) {
  const std::string text = readFile(kExample);
  {
    ScopedEnv limit("LOOM_MAX_PLAN_BYTES", "100");
    try {
      Plan::parse(text);
      FAIL() << "a plan over LOOM_MAX_PLAN_BYTES was accepted";
    } catch (const PlanError& error) {
      EXPECT_EQ(error.detail(), "the plan is " + std::to_string(text.size()) +
                                    " bytes, over the limit of 100 bytes (LOOM_MAX_PLAN_BYTES raises it)");
    }
  }
  {
    const fs::path path = writeOversizedPlan(40u << 20);
    ScopedEnv limit("LOOM_MAX_PLAN_BYTES", std::to_string(64u << 20).c_str());
    EXPECT_EQ(Plan::load(path.string()).name, "allreduce_2r_simple");
    fs::remove(path);
  }
}

TEST(PlanSizeLimitTest, GarbageEnvironmentValueIsAnInvalidArgument) {
  for (const char* value : {"lots", "-5", "0", "12MB", " 100", "+100", "18446744073709551616"}) {
    ScopedEnv limit("LOOM_MAX_PLAN_BYTES", value);
    try {
      maxPlanBytes();
      ADD_FAILURE() << "LOOM_MAX_PLAN_BYTES=" << value << " was accepted";
    } catch (const PlanError&) {
      ADD_FAILURE() << "a bad environment value is not a bad plan";
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
      EXPECT_EQ(std::string(error.what()),
                std::string("LOOM_MAX_PLAN_BYTES: expected a positive number of bytes, got '") + value + "'");
    }
  }
}

void expectInvalidJson(const std::string& text, const std::string& detail) {
  try {
    Plan::parse(text, "deep.json");
    ADD_FAILURE() << "accepted";
  } catch (const PlanError& error) {
    EXPECT_EQ(error.jsonPath(), "$");
    EXPECT_EQ(error.detail(), detail);
    EXPECT_EQ(error.origin(), "deep.json");
  }
}

TEST(DeepNestingTest, HundredThousandOpenBracketsAreRefused) {
  expectInvalidJson(std::string(100000, '['),
                    "invalid JSON: The JSON document has an improper structure: missing or "
                    "superfluous commas, braces, missing keys, etc.");
}

TEST(DeepNestingTest, BalancedNestingPastTheDepthLimitIsRefused) {
  expectInvalidJson(std::string(100000, '[') + std::string(100000, ']'),
                    "invalid JSON: The JSON document was too deep (too many nested objects and arrays)");
}

TEST(DeepNestingTest, NestedObjectsInsideAPlanAreRefused) {
  std::string text = R"({"format_version": 1, "metadata": {"parameters": )";
  for (int i = 0; i < 100000; ++i) text += R"({"a": )";
  text += "1" + std::string(100000, '}') + "}}";
  expectInvalidJson(text, "invalid JSON: The JSON document was too deep (too many nested objects and arrays)");
}

TEST(MissingFileTest, LoadNamesTheFileAndTheReason) {
  const std::string path = (kCorpus / "no_such_plan.json").string();
  try {
    Plan::load(path);
    FAIL() << "a missing file loaded";
  } catch (const PlanError&) {
    FAIL() << "a missing file is not a bad plan";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
    EXPECT_EQ(std::string(error.what()), "cannot open plan file '" + path + "': No such file or directory");
  }
}

}  // namespace
}  // namespace loom
