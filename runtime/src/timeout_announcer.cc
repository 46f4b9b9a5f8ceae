#include "timeout_announcer.hpp"

#include <optional>
#include <string>

#include "log.hpp"

namespace loom {

TimeoutAnnouncer::TimeoutAnnouncer(const DeviceDiagnostics& diagnostics, std::chrono::milliseconds period)
    : diagnostics_(diagnostics), period_(period), thread_([this] { run(); }) {}

TimeoutAnnouncer::~TimeoutAnnouncer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TimeoutAnnouncer::run() {
  bool announced = false;  // the record now in place was written out
  auto look = [&] {
    const std::optional<std::string> report = diagnostics_.report();
    if (!report) {
      announced = false;
    } else if (!announced) {
      logWarning(*report + (diagnostics_.endedCleanly()
                                ? "; the kernel returned without finishing its call (the CUDA context stays "
                                  "usable): the communicator must be aborted and created anew"
                                : "; the kernel stopped there, so the next CUDA call of this process fails"));
      announced = true;
    }
  };
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) look();
  look();  // a record written since the last look is said before the communicator goes
}

}  // namespace loom
