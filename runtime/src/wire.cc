#include "wire.hpp"

#include <algorithm>
#include <cstdio>

namespace loom::wire {
namespace {

void put32(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}
void put64(uint8_t* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}
uint32_t get32(const uint8_t* in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= static_cast<uint32_t>(in[i]) << (8 * i);
  return value;
}
uint64_t get64(const uint8_t* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

}  // namespace

HeaderBytes encodeHeader(const Header& header) {
  HeaderBytes bytes{};
  put32(&bytes[0], kMagic);
  bytes[4] = static_cast<uint8_t>(kVersion & 0xff);
  bytes[5] = static_cast<uint8_t>(kVersion >> 8);
  uint16_t kind = static_cast<uint16_t>(header.kind);
  bytes[6] = static_cast<uint8_t>(kind & 0xff);
  bytes[7] = static_cast<uint8_t>(kind >> 8);
  put32(&bytes[8], header.source);
  put32(&bytes[12], header.aux);
  put64(&bytes[16], header.tag);
  put64(&bytes[24], header.length);
  return bytes;
}

Header decodeHeader(const uint8_t* bytes) {
  uint32_t magic = get32(bytes);
  if (magic != kMagic) throw ProtocolError("not a Loom bootstrap message (magic " + hex32(magic) + ")");
  uint16_t version = static_cast<uint16_t>(bytes[4] | (bytes[5] << 8));
  if (version != kVersion) {
    throw ProtocolError("bootstrap protocol version " + std::to_string(version) + ", this build speaks version " +
                        std::to_string(kVersion) + " (mixed Loom versions?)");
  }
  uint16_t kind = static_cast<uint16_t>(bytes[6] | (bytes[7] << 8));
  if (kind == 0 || kind > kLastKind) throw ProtocolError("unknown message kind " + std::to_string(kind));
  Header header;
  header.kind = static_cast<Kind>(kind);
  header.source = get32(&bytes[8]);
  header.aux = get32(&bytes[12]);
  header.tag = get64(&bytes[16]);
  header.length = get64(&bytes[24]);
  return header;
}

std::vector<uint8_t> encodeHello(const Hello& hello) {
  std::vector<uint8_t> payload(kHelloBytes, 0);
  std::copy(hello.secret.begin(), hello.secret.end(), payload.begin());
  put32(&payload[kSecretBytes], hello.worldSize);
  net::SocketAddress::Packed address = hello.listenAddress.pack();
  std::copy(address.begin(), address.end(), payload.begin() + kSecretBytes + 8);
  return payload;
}

Hello decodeHello(const std::vector<uint8_t>& payload) {
  if (payload.size() != kHelloBytes)
    throw ProtocolError("malformed hello (" + std::to_string(payload.size()) + " bytes)");
  Hello hello;
  std::copy(payload.begin(), payload.begin() + kSecretBytes, hello.secret.begin());
  hello.worldSize = get32(&payload[kSecretBytes]);
  std::optional<net::SocketAddress> address = net::SocketAddress::unpack(&payload[kSecretBytes + 8]);
  if (!address) throw ProtocolError("malformed hello (bad listening address)");
  hello.listenAddress = *address;
  return hello;
}

bool sameSecret(const Secret& a, const Secret& b) {
  uint8_t difference = 0;
  for (size_t i = 0; i < kSecretBytes; ++i) difference |= static_cast<uint8_t>(a[i] ^ b[i]);
  return difference == 0;
}

size_t FrameReader::consume(const uint8_t* data, size_t size, uint64_t maxPayload) {
  size_t used = 0;
  if (!header_) {
    size_t take = std::min(size, kHeaderBytes - headerFilled_);
    std::copy(data, data + take, headerBytes_.begin() + headerFilled_);
    headerFilled_ += take;
    used += take;
    // Refuse a stranger on its first four bytes rather than wait for a header it may never finish.
    if (headerFilled_ >= 4 && get32(headerBytes_.data()) != kMagic) decodeHeader(headerBytes_.data());
    if (headerFilled_ < kHeaderBytes) return used;
    Header header = decodeHeader(headerBytes_.data());
    if (header.length > maxPayload) {
      throw ProtocolError("message of " + std::to_string(header.length) + " bytes is over the limit of " +
                          std::to_string(maxPayload) + " bytes");
    }
    header_ = header;
    payload_.clear();
    payload_.reserve(header.length);
  }
  size_t take = std::min<uint64_t>(size - used, header_->length - payload_.size());
  payload_.insert(payload_.end(), data + used, data + used + take);
  return used + take;
}

std::pair<Header, std::vector<uint8_t>> FrameReader::take() {
  std::pair<Header, std::vector<uint8_t>> frame{*header_, std::move(payload_)};
  header_.reset();
  headerFilled_ = 0;
  payload_ = {};
  return frame;
}

}  // namespace loom::wire
