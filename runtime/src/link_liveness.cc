#include "link_liveness.hpp"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "environment.hpp"
#include "socket.hpp"

namespace loom {
namespace {

constexpr int64_t kDefaultLinkTimeoutMs = 2000;

std::string addressOf(int fd, bool remote) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const int result = remote ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                            : ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  if (result != 0) return "?";
  return net::SocketAddress(reinterpret_cast<sockaddr*>(&address), length).toString();
}

// The interface that holds the socket's local address.
std::string interfaceOf(int fd) {
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) return "";
  const std::string host = net::SocketAddress(reinterpret_cast<sockaddr*>(&local), length).host();
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owner(list, &::freeifaddrs);
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const socklen_t size = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (net::SocketAddress(entry->ifa_addr, size).host() == host) return entry->ifa_name;
  }
  return "";
}

}  // namespace

int64_t linkTimeoutMs() {
  static const int64_t value = [] {
    const std::optional<std::string> text = processEnvironment("LOOM_LINK_TIMEOUT_MS");
    return text ? parseInteger(*text, 0, 3'600'000, "LOOM_LINK_TIMEOUT_MS") : kDefaultLinkTimeoutMs;
  }();
  return value;
}

void keepLinkAlive(int fd) {
  const int64_t timeoutMs = linkTimeoutMs();
  if (timeoutMs == 0) return;
  const int on = 1, idle = 1, interval = 1, probes = int(timeoutMs / 1000) + 1;
  const unsigned int userTimeout = unsigned(timeoutMs);
  // Best effort: a socket family without these options (a Unix socket) keeps the kernel's defaults.
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeout, sizeof(userTimeout));
}

bool isLostLinkError(int error) { return error == ETIMEDOUT; }

std::string lostLinkText(int fd, const std::string& peer, const net::SocketAddress& remote) {
  const std::string device = interfaceOf(fd);
  return "the link to " + peer + " (" + addressOf(fd, false) + (device.empty() ? "" : " on " + device) + " to " +
         (remote.valid() ? remote.toString() : addressOf(fd, true)) + ") was lost: nothing sent was acknowledged within LOOM_LINK_TIMEOUT_MS=" +
         std::to_string(linkTimeoutMs()) + " ms (a cut link, a switch or the peer's host down)";
}

}  // namespace loom
