#include "socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "errno_text.hpp"
#include "link_liveness.hpp"
#include "loom/error.hpp"

namespace loom::net {
namespace {

[[noreturn]] void throwErrno(ErrorCategory category, const std::string& what, int error) {
  throw Error(category, what + ": " + errnoText(error));
}

// Waits for `events` on fd until the deadline; false when the deadline passed first.
bool waitFor(int fd, short events, const Deadline& deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    int ready = ::poll(&entry, 1, deadline.remainingMs());
    if (ready > 0) return true;
    if (ready == 0) {
      if (deadline.expired()) return false;
      continue;
    }
    if (errno != EINTR) throwErrno(ErrorCategory::kSystem, "poll", errno);
  }
}

Socket newSocket(int family) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throwErrno(ErrorCategory::kSystem, "socket", errno);
  Socket socket(fd);
  int one = 1;
  // Bootstrap messages are small and latency-bound; Nagle would hold them back.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  keepLinkAlive(fd);
  return socket;
}

bool isRetryableConnectError(int error) {
  return error == ECONNREFUSED || error == ECONNRESET || error == ECONNABORTED || error == ETIMEDOUT ||
         error == EHOSTUNREACH || error == ENETUNREACH || error == EAGAIN;
}

}  // namespace

SocketAddress::SocketAddress(const sockaddr* address, socklen_t length) {
  if (length > sizeof(storage_) || (address->sa_family != AF_INET && address->sa_family != AF_INET6)) return;
  std::memcpy(&storage_, address, length);
  length_ = address->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

SocketAddress SocketAddress::resolve(const std::string& host, uint16_t port, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  int status = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (status != 0) {
    throw Error(ErrorCategory::kInvalidArgument,
                what + ": cannot resolve host '" + host + "': " + ::gai_strerror(status));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(list, &::freeaddrinfo);
  const addrinfo* chosen = nullptr;
  for (const addrinfo* entry = list; entry != nullptr; entry = entry->ai_next) {
    if (entry->ai_family == AF_INET) {
      chosen = entry;
      break;
    }
    if (entry->ai_family == AF_INET6 && chosen == nullptr) chosen = entry;
  }
  if (chosen == nullptr) throw Error(ErrorCategory::kInvalidArgument, what + ": host '" + host + "' has no IP address");
  return SocketAddress(chosen->ai_addr, static_cast<socklen_t>(chosen->ai_addrlen)).withPort(port);
}

SocketAddress SocketAddress::parse(std::string_view hostPort, const std::string& what) {
  std::string text(hostPort);
  auto bad = [&](const std::string& why) {
    return Error(ErrorCategory::kInvalidArgument,
                 what + ": expected HOST:PORT or [IPV6]:PORT, got '" + text + "' (" + why + ")");
  };
  std::string host;
  std::string portText;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') throw bad("unclosed '['");
    host = text.substr(1, close - 1);
    portText = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos) throw bad("no port");
    host = text.substr(0, colon);
    portText = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) throw bad("write IPv6 addresses in brackets");
  }
  if (host.empty()) throw bad("no host");
  if (portText.empty() || portText.size() > 5 || portText.find_first_not_of("0123456789") != std::string::npos) {
    throw bad("the port is not a number");
  }
  unsigned long port = std::stoul(portText);
  if (port == 0 || port > 65535) throw bad("the port must be 1 to 65535");
  return resolve(host, static_cast<uint16_t>(port), what);
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return 0;
}

SocketAddress SocketAddress::withPort(uint16_t port) const {
  SocketAddress copy = *this;
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&copy.storage_)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&copy.storage_)->sin6_port = htons(port);
  return copy;
}

SocketAddress SocketAddress::wildcard() const {
  SocketAddress copy = *this;
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&copy.storage_)->sin_addr.s_addr = htonl(INADDR_ANY);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&copy.storage_)->sin6_addr = in6addr_any;
  return copy;
}

SocketAddress::Packed SocketAddress::pack() const {
  Packed packed{};
  uint16_t port = this->port();
  packed[2] = static_cast<uint8_t>(port >> 8);
  packed[3] = static_cast<uint8_t>(port & 0xff);
  if (family() == AF_INET) {
    packed[0] = 4;
    std::memcpy(&packed[4], &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, 4);
  } else if (family() == AF_INET6) {
    packed[0] = 6;
    std::memcpy(&packed[4], &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, 16);
  }
  return packed;
}

std::optional<SocketAddress> SocketAddress::unpack(const uint8_t* packed) {
  uint16_t port = static_cast<uint16_t>((packed[2] << 8) | packed[3]);
  if (packed[0] == 4) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    std::memcpy(&address.sin_addr, packed + 4, 4);
    return SocketAddress(reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  }
  if (packed[0] == 6) {
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_port = htons(port);
    std::memcpy(&address.sin6_addr, packed + 4, 16);
    return SocketAddress(reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  }
  return std::nullopt;
}

std::string SocketAddress::host() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, text, sizeof(text));
  } else if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, text, sizeof(text));
  }
  return text;
}

std::string SocketAddress::toString() const {
  if (family() == AF_INET) return host() + ":" + std::to_string(port());
  if (family() == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return "<no address>";
}

Socket::Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)), peer_(other.peer_) {}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    peer_ = other.peer_;
  }
  return *this;
}

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Socket Socket::listen(const SocketAddress& address, int backlog) {
  Socket socket = newSocket(address.family());
  int one = 1;
  ::setsockopt(socket.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(socket.fd(), address.raw(), address.length()) != 0) {
    int error = errno;
    throw Error(error == EADDRINUSE || error == EADDRNOTAVAIL || error == EACCES ? ErrorCategory::kTransport
                                                                                 : ErrorCategory::kSystem,
                "cannot listen on " + address.toString() + ": bind: " + errnoText(error));
  }
  if (::listen(socket.fd(), backlog) != 0) throwErrno(ErrorCategory::kSystem, "listen on " + address.toString(), errno);
  return socket;
}

Socket Socket::adoptListener(int fd, const std::string& what) {
  int accepting = 0;
  int type = 0;
  socklen_t length = sizeof(int);
  bool listening = ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) == 0 && accepting != 0;
  length = sizeof(int);
  bool stream = ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0 && type == SOCK_STREAM;
  if (!listening || !stream) {
    throw Error(ErrorCategory::kInvalidArgument,
                what + ": descriptor " + std::to_string(fd) + " is not a listening TCP socket");
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 || ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    throwErrno(ErrorCategory::kSystem, what + ": fcntl", errno);
  }
  return Socket(fd);
}

Socket Socket::connect(const SocketAddress& address, const Deadline& deadline, bool retryRefused,
                       const std::string& peer, const std::function<void()>& betweenAttempts) {
  int lastError = 0;
  auto backoff = std::chrono::milliseconds(5);
  while (true) {
    Socket socket = newSocket(address.family());
    int status = ::connect(socket.fd(), address.raw(), address.length());
    int error = status == 0 ? 0 : errno;
    if (error == EINPROGRESS || error == EINTR) {
      if (!waitFor(socket.fd(), POLLOUT, deadline)) {
        throw Error(ErrorCategory::kTimeout, peer + " at " + address.toString() +
                                                 " did not accept a connection within " +
                                                 std::to_string(deadline.timeoutMs()) + " ms");
      }
      socklen_t length = sizeof(error);
      if (::getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
    }
    if (error == 0) {
      socket.peer_ = address;
      return socket;
    }
    lastError = error;
    if (!retryRefused || !isRetryableConnectError(error)) {
      throw Error(ErrorCategory::kTransport,
                  "cannot connect to " + peer + " at " + address.toString() + ": " + errnoText(error));
    }
    if (deadline.expired()) break;
    // The listener may not be up yet: try again, backing off so that many ranks do not hammer it.
    std::this_thread::sleep_for(
        std::min<std::chrono::milliseconds>(backoff, std::chrono::milliseconds(std::max(1, deadline.remainingMs()))));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
    if (betweenAttempts) betweenAttempts();
    if (deadline.expired()) break;
  }
  throw Error(ErrorCategory::kTimeout, peer + " at " + address.toString() + " could not be reached within " +
                                           std::to_string(deadline.timeoutMs()) +
                                           " ms (last error: " + errnoText(lastError) + ")");
}

Socket Socket::accept(SocketAddress* remote) const {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  while (true) {
    int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Socket socket(fd);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      keepLinkAlive(fd);
      socket.peer_ = SocketAddress(reinterpret_cast<sockaddr*>(&address), length);
      if (remote != nullptr) *remote = socket.peer_;
      return socket;
    }
    if (errno == EINTR) continue;
    // A connection that was reset while it waited in the backlog is simply gone.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) return Socket();
    throwErrno(ErrorCategory::kSystem, "accept", errno);
  }
}

SocketAddress Socket::localAddress() const {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throwErrno(ErrorCategory::kSystem, "getsockname", errno);
  }
  return SocketAddress(reinterpret_cast<sockaddr*>(&address), length);
}

SocketAddress Socket::remoteAddress() const {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) return SocketAddress();
  return SocketAddress(reinterpret_cast<sockaddr*>(&address), length);
}

std::optional<size_t> Socket::readSome(void* data, size_t size, const std::string& peer, bool* reset) const {
  while (true) {
    ssize_t got = ::recv(fd_, data, size, 0);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
    if (errno == ECONNRESET) {
      if (reset != nullptr) *reset = true;
      return 0;
    }
    // No route for now (an interface down, a flap): TCP retransmits, and LOOM_LINK_TIMEOUT_MS decides.
    if (errno == EHOSTUNREACH || errno == ENETUNREACH) return std::nullopt;
    if (isLostLinkError(errno)) throw Error(ErrorCategory::kTransport, lostLinkText(fd_, peer, peer_));
    throwErrno(ErrorCategory::kTransport, "receiving from " + peer, errno);
  }
}

std::optional<size_t> Socket::writeSome(const void* data, size_t size, const std::string& peer) const {
  while (true) {
    // MSG_NOSIGNAL: a peer that went away is an error for this call, not a SIGPIPE for the process.
    ssize_t sent = ::send(fd_, data, size, MSG_NOSIGNAL);
    if (sent >= 0) return static_cast<size_t>(sent);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
    if (errno == EHOSTUNREACH || errno == ENETUNREACH) return std::nullopt;
    if (isLostLinkError(errno)) throw Error(ErrorCategory::kTransport, lostLinkText(fd_, peer, peer_));
    throwErrno(ErrorCategory::kTransport, "sending to " + peer, errno);
  }
}

void Socket::sendAll(const void* data, size_t size, const Deadline& deadline, const std::string& peer) const {
  const auto* bytes = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < size) {
    std::optional<size_t> sent = writeSome(bytes + done, size - done, peer);
    if (sent) {
      done += *sent;
      continue;
    }
    if (!waitFor(fd_, POLLOUT, deadline)) {
      throw Error(ErrorCategory::kTimeout, peer + " took " + std::to_string(done) + " of " + std::to_string(size) +
                                               " bytes within " + std::to_string(deadline.timeoutMs()) + " ms");
    }
  }
}

void Socket::recvAll(void* data, size_t size, const Deadline& deadline, const std::string& peer) const {
  auto* bytes = static_cast<uint8_t*>(data);
  size_t done = 0;
  while (done < size) {
    std::optional<size_t> got = readSome(bytes + done, size - done, peer);
    if (got && *got == 0) {
      throw Error(ErrorCategory::kTransport, peer + " closed the connection after " + std::to_string(done) + " of " +
                                                 std::to_string(size) + " bytes");
    }
    if (got) {
      done += *got;
      continue;
    }
    if (!waitFor(fd_, POLLIN, deadline)) {
      throw Error(ErrorCategory::kTimeout, peer + " sent " + std::to_string(done) + " of " + std::to_string(size) +
                                               " bytes within " + std::to_string(deadline.timeoutMs()) + " ms");
    }
  }
}

}  // namespace loom::net
