// Bootstrap::fromEnvironment: a bootstrap for a process that a launcher started.

#include <mutex>

#include "listener_registry.hpp"
#include "log.hpp"
#include "loom/bootstrap.hpp"
#include "loom/error.hpp"
#include "loom/launch_environment.hpp"
#include "socket.hpp"

namespace loom {
namespace {

// A launcher's listening socket is inherited once per process; only the first rank-0 Bootstrap
// takes it, later ones bind the port themselves.
void adoptInheritedListener(int fd, const UniqueId& id) {
  static std::mutex mutex;
  static bool adopted = false;
  std::lock_guard lock(mutex);
  if (adopted) return;
  adopted = true;
  net::Socket socket = net::Socket::adoptListener(fd, "LOOM_BOOTSTRAP_LISTEN_FD");
  if (socket.localAddress().port() != id.port()) {
    throw Error(ErrorCategory::kInvalidArgument,
                "LOOM_BOOTSTRAP_LISTEN_FD: descriptor " + std::to_string(fd) + " listens on port " +
                    std::to_string(socket.localAddress().port()) + ", the bootstrap address is " + id.address());
  }
  parkListener(*net::SocketAddress::unpack(id.packedAddress().data()), std::move(socket));
}

void noteDerivedSecret(const LaunchEnvironment& env) {
  static std::once_flag once;
  std::call_once(once, [&] {
    logWarning("LOOM_BOOTSTRAP_SECRET is not set; the bootstrap secret is derived from the " + env.launcher +
               " job's identity and the root address, which keeps jobs apart but does not authenticate ranks. Set "
               "LOOM_BOOTSTRAP_SECRET to the same 32 hex digits on every rank (LOOM_BOOTSTRAP_REQUIRE_SECRET=1 "
               "insists on it).");
  });
}

}  // namespace

Bootstrap Bootstrap::fromEnvironment(std::optional<int64_t> timeoutMs, InterruptCheck interruptCheck) {
  LaunchEnvironment env = detectLaunchEnvironment();
  if (env.rank == 0) {
    if (env.listenFd) adoptInheritedListener(*env.listenFd, env.uniqueId);
    if (!env.secretFromEnvironment) noteDerivedSecret(env);
  }
  return Bootstrap(env.rank, env.worldSize, env.uniqueId, timeoutMs, std::move(interruptCheck));
}

}  // namespace loom
