#pragma once

// Runs the ranks of a bootstrap job on threads of this process, one Bootstrap object each.

#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "loom/bootstrap.hpp"
#include "loom/error.hpp"

namespace loom::testing {

struct RankOutcome {
  bool ok = false;
  std::optional<ErrorCategory> category;  // set when the rank threw a loom::Error
  std::string message;                    // its what()
};

// Starts `ranks` (a subset of 0..worldSize-1; the others never arrive), each after `delayMs[i]`
// milliseconds, constructing a Bootstrap and running `body` on it.
inline std::vector<RankOutcome> runRanks(int worldSize, const UniqueId& id, int64_t timeoutMs,
                                         const std::vector<int>& ranks, const std::function<void(Bootstrap&)>& body,
                                         const std::vector<int>& delayMs = {}) {
  std::vector<RankOutcome> outcomes(static_cast<size_t>(worldSize));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    int rank = ranks[i];
    int delay = i < delayMs.size() ? delayMs[i] : 0;
    threads.emplace_back([&, rank, delay] {
      RankOutcome& outcome = outcomes[rank];
      if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      try {
        Bootstrap bootstrap(rank, worldSize, id, timeoutMs);
        body(bootstrap);
        outcome.ok = true;
      } catch (const Error& error) {
        outcome.category = error.category();
        outcome.message = error.what();
      } catch (const std::exception& error) {
        outcome.message = std::string("non-loom exception: ") + error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

inline std::vector<int> allRanks(int worldSize) {
  std::vector<int> ranks;
  for (int r = 0; r < worldSize; ++r) ranks.push_back(r);
  return ranks;
}

inline std::vector<uint8_t> bytesOf(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

}  // namespace loom::testing
