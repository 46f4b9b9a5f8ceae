// TimeoutAnnouncer: a timeout a kernel records is written on stderr once, without anyone asking.
// Here a host thread records it, as the CPU backend's waits do, into host memory.

#include "timeout_announcer.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "loom/device/diagnostics.hpp"
#include "loom/device_diagnostics.hpp"

namespace loom {
namespace {

using std::chrono::milliseconds;

size_t count(const std::string& text, const std::string& part) {
  size_t found = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++found;
  return found;
}

void recordTimeout(const DeviceDiagnostics& diagnostics, int channel, int peer, int op) {
  EXPECT_THROW(
      device::reportTimeout(diagnostics.waitContext(channel, peer), device::WaitKind::kSemaphore, op, 5, 4, 10'000'000),
      std::runtime_error);
}

TEST(TimeoutAnnouncer, WritesEachRecordedTimeoutOnceOnStderr) {
  DeviceDiagnostics diagnostics(3, 10, false);
  testing::internal::CaptureStderr();
  {
    TimeoutAnnouncer announcer(diagnostics, milliseconds(2));
    std::this_thread::sleep_for(milliseconds(20));  // nothing recorded: nothing said
    recordTimeout(diagnostics, 2, 1, 7);
    std::this_thread::sleep_for(milliseconds(50));  // many looks at one record
    diagnostics.clear();
    std::this_thread::sleep_for(milliseconds(20));
    recordTimeout(diagnostics, 0, 4, 9);
    std::this_thread::sleep_for(milliseconds(50));
  }
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(said, "loom: warning: "), 2u) << said;
  EXPECT_EQ(count(said, "rank 3, op 7: semaphore wait on channel 2 (peer 1) timed out after 10 ms"), 1u) << said;
  EXPECT_EQ(count(said, "rank 3, op 9: semaphore wait on channel 0 (peer 4) timed out after 10 ms"), 1u) << said;
  EXPECT_EQ(count(said, "; the kernel stopped there, so the next CUDA call of this process fails\n"), 2u) << said;
}

TEST(TimeoutAnnouncer, LooksALastTimeAndStopsAtOnceWhenItGoes) {
  DeviceDiagnostics diagnostics(1, 10, false);
  testing::internal::CaptureStderr();
  const auto start = std::chrono::steady_clock::now();
  {
    TimeoutAnnouncer announcer(diagnostics, std::chrono::hours(1));
    recordTimeout(diagnostics, 5, 0, 2);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(said, "rank 1, op 2: semaphore wait on channel 5 (peer 0) timed out after 10 ms"), 1u) << said;
}

}  // namespace
}  // namespace loom
