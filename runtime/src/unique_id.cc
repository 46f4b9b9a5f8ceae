#include "loom/unique_id.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "environment.hpp"
#include "interface_choice.hpp"
#include "listener_registry.hpp"
#include "loom/error.hpp"
#include "socket.hpp"

namespace loom {
namespace {

constexpr uint8_t kMagic[3] = {'L', 'M', 'I'};
constexpr uint8_t kVersion = 1;

// LOOM_BOOTSTRAP_HOST, else the address of the interface Loom's sockets use (interface_choice.hpp):
// where other hosts can most likely reach us.
std::string defaultHost() {
  if (std::optional<std::string> host = processEnvironment("LOOM_BOOTSTRAP_HOST")) return *host;
  return chosenInterface().address.host();
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool decodeHex(std::string_view hex, uint8_t* out, size_t bytes) {
  if (hex.size() != 2 * bytes) return false;
  for (size_t i = 0; i < bytes; ++i) {
    int high = hexValue(hex[2 * i]);
    int low = hexValue(hex[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return true;
}

std::string encodeHex(const uint8_t* data, size_t bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text(2 * bytes, '0');
  for (size_t i = 0; i < bytes; ++i) {
    text[2 * i] = kDigits[data[i] >> 4];
    text[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return text;
}

net::SocketAddress unpackAddress(const std::array<uint8_t, UniqueId::kAddressBytes>& packed) {
  return *net::SocketAddress::unpack(packed.data());
}

}  // namespace

UniqueId::Secret UniqueId::randomSecret() {
  Secret secret{};
  size_t filled = 0;
  while (filled < secret.size()) {
    ssize_t got = ::getrandom(secret.data() + filled, secret.size() - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(ErrorCategory::kSystem, std::string("getrandom: ") + std::strerror(errno));
    filled += static_cast<size_t>(got);
  }
  return secret;
}

UniqueId::Secret UniqueId::parseSecret(std::string_view hex, const std::string& what) {
  Secret secret{};
  if (!decodeHex(hex, secret.data(), secret.size())) {
    throw Error(ErrorCategory::kInvalidArgument, what + ": expected " + std::to_string(2 * kSecretBytes) +
                                                     " hex digits, got " + std::to_string(hex.size()) + " characters");
  }
  return secret;
}

UniqueId UniqueId::create(const std::string& host) {
  std::string chosen = host.empty() ? defaultHost() : host;
  net::SocketAddress address = net::SocketAddress::resolve(chosen, 0, "UniqueId::create");
  net::Socket listener = net::Socket::listen(address);
  address = listener.localAddress();
  UniqueId id;
  id.address_ = address.pack();
  id.secret_ = randomSecret();
  parkListener(address, std::move(listener));
  return id;
}

UniqueId UniqueId::fromAddress(const std::string& hostPort, const Secret& secret) {
  UniqueId id;
  id.address_ = net::SocketAddress::parse(hostPort, "bootstrap address").pack();
  id.secret_ = secret;
  return id;
}

UniqueId UniqueId::fromBytes(std::span<const uint8_t> bytes) {
  auto bad = [](const std::string& why) { return Error(ErrorCategory::kInvalidArgument, "not a UniqueId: " + why); };
  if (bytes.size() != kBytes) {
    throw bad(std::to_string(bytes.size()) + " bytes, expected " + std::to_string(kBytes));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) throw bad("wrong magic");
  if (bytes[3] != kVersion) throw bad("version " + std::to_string(bytes[3]) + ", expected " + std::to_string(kVersion));
  UniqueId id;
  std::memcpy(id.address_.data(), bytes.data() + 4, kAddressBytes);
  std::optional<net::SocketAddress> address = net::SocketAddress::unpack(id.address_.data());
  if (!address) throw bad("unknown address family " + std::to_string(id.address_[0]));
  if (address->port() == 0) throw bad("port 0");
  // Re-pack so that bytes the format ignores (reserved, IPv4 padding) cannot make equal ids differ.
  id.address_ = address->pack();
  std::memcpy(id.secret_.data(), bytes.data() + 4 + kAddressBytes, kSecretBytes);
  return id;
}

UniqueId UniqueId::fromHex(std::string_view hex) {
  Bytes bytes{};
  if (!decodeHex(hex, bytes.data(), bytes.size())) {
    throw Error(ErrorCategory::kInvalidArgument, "not a UniqueId: expected " + std::to_string(2 * kBytes) +
                                                     " hex digits, got " + std::to_string(hex.size()) + " characters");
  }
  return fromBytes(bytes);
}

UniqueId::Bytes UniqueId::toBytes() const {
  Bytes bytes{};
  std::memcpy(bytes.data(), kMagic, sizeof(kMagic));
  bytes[3] = kVersion;
  std::memcpy(bytes.data() + 4, address_.data(), kAddressBytes);
  std::memcpy(bytes.data() + 4 + kAddressBytes, secret_.data(), kSecretBytes);
  return bytes;
}

std::string UniqueId::toHex() const {
  Bytes bytes = toBytes();
  return encodeHex(bytes.data(), bytes.size());
}

std::string UniqueId::address() const { return unpackAddress(address_).toString(); }

uint16_t UniqueId::port() const { return unpackAddress(address_).port(); }

}  // namespace loom
