#include "goodbye_at_exit.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace loom::nccl {
namespace {

struct OpenBootstraps {
  std::mutex mutex;
  std::vector<std::weak_ptr<Bootstrap>> bootstraps;
  bool registered = false;  // atExit, once

  static OpenBootstraps& process() {
    static OpenBootstraps open;
    return open;
  }

  // Registered after `open` is made, so it runs before `open` goes.
  static void atExit() {
    OpenBootstraps& open = process();
    std::lock_guard lock(open.mutex);
    for (const std::weak_ptr<Bootstrap>& held : open.bootstraps) {
      if (std::shared_ptr<Bootstrap> bootstrap = held.lock()) bootstrap->sayGoodbye();
    }
  }
};

}  // namespace

void sayGoodbyeAtExit(const std::shared_ptr<Bootstrap>& bootstrap) {
  OpenBootstraps& open = OpenBootstraps::process();
  std::lock_guard lock(open.mutex);
  if (!open.registered) open.registered = std::atexit(OpenBootstraps::atExit) == 0;
  std::erase_if(open.bootstraps, [](const std::weak_ptr<Bootstrap>& held) { return held.expired(); });
  open.bootstraps.push_back(bootstrap);
}

}  // namespace loom::nccl
