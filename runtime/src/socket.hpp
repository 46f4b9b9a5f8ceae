#pragma once

// TCP sockets for the bootstrap: an address type that packs into a fixed number of bytes, and an
// RAII socket (non-blocking, close-on-exec) with poll()-based timed connect/send/recv.

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "deadline.hpp"

namespace loom::net {

// An IPv4 or IPv6 address with a port.
class SocketAddress {
 public:
  // family (4 or 6), reserved byte, port (big-endian), 16 address bytes (IPv4 uses the first 4).
  static constexpr size_t kPackedBytes = 20;
  using Packed = std::array<uint8_t, kPackedBytes>;

  SocketAddress() = default;
  SocketAddress(const sockaddr* address, socklen_t length);

  // "host:port" or "[ipv6]:port"; host names are resolved, IPv4 preferred. `what` names the source
  // of the text (an environment variable, an argument) in the InvalidArgument error.
  static SocketAddress parse(std::string_view hostPort, const std::string& what);
  static SocketAddress resolve(const std::string& host, uint16_t port, const std::string& what);
  static std::optional<SocketAddress> unpack(const uint8_t* packed);
  Packed pack() const;

  bool valid() const { return length_ != 0; }
  int family() const { return storage_.ss_family; }
  uint16_t port() const;
  SocketAddress withPort(uint16_t port) const;
  SocketAddress wildcard() const;  // the any-address of the same family, same port
  const sockaddr* raw() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const { return length_; }
  std::string toString() const;  // "10.0.0.1:29500", "[::1]:29500"
  std::string host() const;      // "10.0.0.1", "::1"
  bool operator==(const SocketAddress& other) const { return pack() == other.pack(); }

 private:
  sockaddr_storage storage_{};
  socklen_t length_ = 0;
};

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

  // Binds and listens (SO_REUSEADDR, so a port with connections in TIME_WAIT can be bound again).
  static Socket listen(const SocketAddress& address, int backlog = SOMAXCONN);
  // Takes over an inherited descriptor after checking that it is a listening TCP socket.
  static Socket adoptListener(int fd, const std::string& what);
  // Connects before `deadline`. With retryRefused, a refused connection is tried again (the
  // listener may not be up yet) until the deadline, calling `betweenAttempts` (which may throw)
  // between tries; the timeout Error names `peer` and the last error.
  static Socket connect(const SocketAddress& address, const Deadline& deadline, bool retryRefused,
                        const std::string& peer, const std::function<void()>& betweenAttempts = {});

  // One pending connection, or an invalid socket when there is none.
  Socket accept(SocketAddress* remote) const;
  SocketAddress localAddress() const;
  SocketAddress remoteAddress() const;

  // Non-blocking partial transfers: the bytes moved, or nullopt when the call would block. readSome
  // returns 0 at the end of the stream; a reset connection also reads as the end (and sets *reset,
  // when given, for a reader that must tell them apart). Other failures throw a transport Error
  // naming `peer`.
  std::optional<size_t> readSome(void* data, size_t size, const std::string& peer, bool* reset = nullptr) const;
  std::optional<size_t> writeSome(const void* data, size_t size, const std::string& peer) const;

  // The whole buffer before the deadline, waiting with poll(); a timeout Error names `peer`.
  void sendAll(const void* data, size_t size, const Deadline& deadline, const std::string& peer) const;
  void recvAll(void* data, size_t size, const Deadline& deadline, const std::string& peer) const;

 private:
  int fd_ = -1;
  SocketAddress peer_;  // whom a connected socket reaches (kept: a socket whose link failed cannot tell)
};

}  // namespace loom::net
