#include "departure_watch.hpp"

#include <algorithm>
#include <exception>
#include <optional>

namespace loom {

void DepartureMarks::look(const std::vector<int>& departed, const std::vector<int>& lost,
                          const std::vector<int>& aborted) {
  const Clock::time_point now = Clock::now();
  for (int peer : departed) {
    if (std::find(aborted.begin(), aborted.end(), peer) != aborted.end()) {
      diagnostics_.notePeerAborted(peer);
      continue;
    }
    const Clock::time_point since = goneSince_.emplace(peer, now).first->second;
    if (now - since < kGrace) continue;
    if (std::find(lost.begin(), lost.end(), peer) == lost.end()) {
      diagnostics_.notePeerLeft(peer);
    } else {
      diagnostics_.notePeerGone(peer);
    }
  }
}

DepartureWatch::DepartureWatch(Bootstrap& bootstrap, DeviceDiagnostics& diagnostics)
    : bootstrap_(bootstrap), diagnostics_(diagnostics), thread_([this](const std::stop_token& stop) { run(stop); }) {}

void DepartureWatch::run(const std::stop_token& stop) {
  DepartureMarks marks(diagnostics_);
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    // Wakes at once when the thread is asked to stop (the jthread's destructor).
    wake_.wait_for(lock, stop, DepartureMarks::kPoll, [] { return false; });
    if (stop.stop_requested()) return;
    std::optional<std::vector<int>> departed, lost, aborted;
    try {
      if (auto failure = bootstrap_.announcedFailureIfIdle()) diagnostics_.notePeerFailed(failure->first, failure->second);
      departed = bootstrap_.departedPeersIfIdle();
      if (departed && !departed->empty()) lost = bootstrap_.lostPeersIfIdle();
      if (departed && !departed->empty()) aborted = bootstrap_.abortedPeersIfIdle();
    } catch (const std::exception&) {
      // A broken bootstrap fails the calls that use it; there is nothing to mark from here.
    }
    // Unsure whether a peer said goodbye (a call took the bootstrap between the looks): it counts as lost.
    if (departed) marks.look(*departed, lost.value_or(*departed), aborted.value_or(std::vector<int>{}));
  }
}

}  // namespace loom
