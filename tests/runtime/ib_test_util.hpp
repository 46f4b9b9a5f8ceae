#pragma once

// What the InfiniBand tests share: the fake verbs layer installed per test (every verbs object must
// be gone when a test ends), communicators whose ranks are threads, and small checks.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "communicator_test_util.hpp"
#include "fake_ibverbs.hpp"
#include "loom/communicator.hpp"
#include "loom/error.hpp"

namespace loom::ibtest {

using testing::FakeIbverbs;
using testing::FakeIbverbsCounts;
using testing::RankOutcome;

inline IbConfig fakeConfig(IbSignalMode mode = IbSignalMode::kAtomic) {
  IbConfig config;
  config.device = "fake_ib0";
  config.signalMode = mode;
  return config;
}

inline std::vector<RankOutcome> runIb(int worldSize, const std::function<IbConfig(int)>& configOf,
                                      const std::function<void(Communicator&)>& body) {
  return testing::runCommunicators(worldSize, configOf, body);
}

inline std::vector<RankOutcome> runIb(int worldSize, const IbConfig& config,
                                      const std::function<void(Communicator&)>& body) {
  return testing::runCommunicators(
      worldSize, [&](int) { return config; }, body);
}

inline void expectAllOk(const std::vector<RankOutcome>& outcomes) {
  for (size_t rank = 0; rank < outcomes.size(); ++rank) {
    EXPECT_TRUE(outcomes[rank].ok) << "rank " << rank << ": " << outcomes[rank].message;
  }
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs `call` and returns the Error it throws; a failure when it throws none.
inline Error thrownBy(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "no loom::Error was thrown";
  return Error(ErrorCategory::kSystem, "nothing thrown");
}

inline bool waitUntil(const std::function<bool()>& condition, int timeoutMs = 5000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

inline uint64_t load(const uint64_t& word) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(word)).load(std::memory_order_acquire);
}

inline std::vector<uint8_t> randomBytes(size_t count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<uint8_t> bytes(count);
  for (uint8_t& byte : bytes) byte = uint8_t(random());
  return bytes;
}

// Every test installs the fake, and every verbs object must be gone when it ends.
class IbTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(FakeIbverbs::live(), FakeIbverbsCounts{}); }
  testing::ScopedFakeIbverbs fake_;
};

class IbContextTest : public IbTest {};
class IbConnectionTest : public IbTest {};

}  // namespace loom::ibtest
