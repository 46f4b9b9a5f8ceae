#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace loom {

// What every rank needs to find the others: the address and port where rank 0 (the root) listens,
// and a random 128-bit secret that every bootstrap connection must present. Either rank 0 creates
// one and the application hands it to the other ranks (an MPI broadcast, a file, a store), or every
// rank builds the same one from its launcher's environment (Bootstrap::fromEnvironment).
//
// It is a plain value of kBytes bytes (or 2 * kBytes hex digits):
//   "LMI", version 1, root address (family 4/6, 0, port big-endian, 16 address bytes), secret.
class UniqueId {
 public:
  static constexpr size_t kBytes = 40;
  static constexpr size_t kSecretBytes = 16;
  static constexpr size_t kAddressBytes = 20;
  using Bytes = std::array<uint8_t, kBytes>;
  using Secret = std::array<uint8_t, kSecretBytes>;

  // Listens on `host` at a port the kernel picks and draws the secret from the OS's random source.
  // `host` is an address or a name; empty means LOOM_BOOTSTRAP_HOST, else the first non-loopback
  // IPv4 interface that is up, else 127.0.0.1. The listening socket is kept open for the rank-0
  // Bootstrap that this process creates with this id, so no other program can take the port in
  // between; an id that never gets a rank 0 in this process keeps its socket until the process exits.
  static UniqueId create(const std::string& host = "");
  // An id for an address known in advance ("host:port", "[ipv6]:port"); rank 0 binds it itself.
  static UniqueId fromAddress(const std::string& hostPort, const Secret& secret);
  // InvalidArgument errors when the bytes or text are not a UniqueId of this version.
  static UniqueId fromBytes(std::span<const uint8_t> bytes);
  static UniqueId fromHex(std::string_view hex);

  Bytes toBytes() const;
  std::string toHex() const;
  std::string address() const;  // "10.0.0.1:29500", "[::1]:29500"
  uint16_t port() const;
  const Secret& secret() const { return secret_; }
  const std::array<uint8_t, kAddressBytes>& packedAddress() const { return address_; }

  static Secret randomSecret();
  // 32 hex digits; `what` names where the text came from in the error.
  static Secret parseSecret(std::string_view hex, const std::string& what);

  bool operator==(const UniqueId& other) const = default;

 private:
  UniqueId() = default;
  std::array<uint8_t, kAddressBytes> address_{};
  Secret secret_{};
};

}  // namespace loom
