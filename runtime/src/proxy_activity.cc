#include "loom/proxy_activity.hpp"

#include <cstdio>

namespace loom {
namespace {

const char* stepName(ProxyActivity::Step step) {
  switch (step) {
    case ProxyActivity::Step::kWrite:
      return "copy";
    case ProxyActivity::Step::kSignal:
      return "signal";
    case ProxyActivity::Step::kFlush:
      return "flush";
    case ProxyActivity::Step::kFinishReads:
      return "wait for its reads";
    default:
      return "step";
  }
}

}  // namespace

void ProxyActivity::enter(Step step, uint64_t position, int peer) {
  sinceNs_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  position_.store(position, std::memory_order_relaxed);
  peer_.store(peer, std::memory_order_relaxed);
  step_.store(step, std::memory_order_release);
}

void ProxyActivity::stopped() { step_.store(Step::kStopped, std::memory_order_release); }

std::string ProxyActivity::describe() const {
  const Step step = step_.load(std::memory_order_acquire);
  if (step == Step::kStopped) return "the proxy thread is not running (never started, or stopped)";
  const auto since = Clock::time_point(Clock::duration(sinceNs_.load(std::memory_order_relaxed)));
  const double seconds = std::chrono::duration<double>(Clock::now() - since).count();
  char duration[32];
  std::snprintf(duration, sizeof(duration), "%.3f s", seconds);
  const std::string position = std::to_string(position_.load(std::memory_order_relaxed));
  if (step == Step::kLooking) {
    return "the proxy thread has looked for the trigger at position " + position + " for " + duration +
           " without seeing it (its valid bit never reached the host)";
  }
  const int peer = peer_.load(std::memory_order_relaxed);
  return std::string("the proxy thread has been inside the ") + stepName(step) + " of the trigger at position " +
         position + (peer >= 0 ? " (to rank " + std::to_string(peer) + ")" : "") + " for " + duration +
         ": a call that has not returned";
}

}  // namespace loom
