// LOOM_CPU_CHAOS (loom/device/chaos.hpp): random pauses drawn from the seed, each thread its own stream
// (the seed, the process and the thread's order of first pause), so two runs with one seed pause alike as
// far as the operating system's own timing lets them.

#include "loom/device/chaos.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>

#include "environment.hpp"
#include "log.hpp"

namespace loom::chaos {
namespace {

std::optional<uint64_t> readSeed() {
  const std::optional<std::string> text = processEnvironment("LOOM_CPU_CHAOS");
  if (!text) return std::nullopt;
  const uint64_t seed = uint64_t(parseInteger(*text, 0, INT64_MAX, "LOOM_CPU_CHAOS"));
  logWarning("LOOM_CPU_CHAOS=" + *text +
             ": the CPU backend pauses at random before blocks, ops and the proxy's reads and signals (a test "
             "mode: slow)");
  return seed;
}

const std::optional<uint64_t>& seed() {
  static const std::optional<uint64_t> value = readSeed();
  return value;
}

std::mt19937_64& stream() {
  static std::atomic<uint64_t> threads{0};
  thread_local std::mt19937_64 generator = [] {
    std::seed_seq sequence{*seed(), uint64_t(::getpid()), threads.fetch_add(1)};
    return std::mt19937_64(sequence);
  }();
  return generator;
}

void sleepMicroseconds(uint64_t low, uint64_t high) {
  std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<uint64_t>(low, high)(stream())));
}

}  // namespace

bool enabled() { return seed().has_value(); }

void pauseAt(Site site) {
  const uint32_t draw = std::uniform_int_distribution<uint32_t>(0, 99)(stream());
  switch (site) {
    case Site::kBlockStart:  // any order of blocks and ranks, a rank up to a few ms behind
      if (draw < 80) sleepMicroseconds(0, draw < 20 ? 3000 : 500);
      return;
    case Site::kOp:  // mostly on, now and then a long stall of one block
      if (draw < 25) {
        std::this_thread::yield();
      } else if (draw < 35) {
        sleepMicroseconds(0, 100);
      } else if (draw < 37) {
        sleepMicroseconds(200, 2000);
      }
      return;
    case Site::kProxyRead:  // the proxy comes late to a put's source: the executor goes on meanwhile
    case Site::kProxySignal:
      if (draw < 70) sleepMicroseconds(0, draw < 20 ? 3000 : 300);
      return;
  }
}

}  // namespace loom::chaos
