#pragma once

// Says a device-side timeout on stderr as soon as a kernel records it. The kernel traps, and the
// program's next CUDA call fails with a bare "unspecified launch failure" (torch's synchronize, say),
// which never asks Loom who waited for what; this thread looks at the record every `period` and
// writes it out once (again only after the record was cleared and a new one written), and looks a
// last time when it goes. A wait that ended on a departed peer or an abort returned without a trap:
// that is said too, as such.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "loom/device_diagnostics.hpp"

namespace loom {

class TimeoutAnnouncer {
 public:
  TimeoutAnnouncer(const DeviceDiagnostics& diagnostics, std::chrono::milliseconds period);
  ~TimeoutAnnouncer();  // a last look, then the thread ends
  TimeoutAnnouncer(const TimeoutAnnouncer&) = delete;
  TimeoutAnnouncer& operator=(const TimeoutAnnouncer&) = delete;

 private:
  void run();

  const DeviceDiagnostics& diagnostics_;
  const std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace loom
