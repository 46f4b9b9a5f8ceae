#pragma once

// The bootstrap's wire format. Every message is a frame: a 32-byte header, then `length` payload
// bytes. All integers are little-endian.
//
//   offset  size  field
//   0       4     magic "LOOM"
//   4       2     version (1)
//   6       2     kind
//   8       4     source rank
//   12      4     aux (per kind: ring origin of an allGather block, error category of an abort)
//   16      8     tag
//   24      8     payload length
//
// The first frame on every connection is a hello that carries the job's secret; nothing else is
// accepted before it, and its payload has exactly the hello's size, so a stranger cannot make a
// rank allocate memory.

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "socket.hpp"

namespace loom::wire {

constexpr uint32_t kMagic = 0x4d4f4f4c;  // "LOOM" read as little-endian bytes
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;
// Bootstrap traffic is metadata (addresses, handles); 1 GiB per message leaves room for large jobs
// and still refuses a length field that is garbage.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 30;
constexpr size_t kSecretBytes = 16;

using Secret = std::array<uint8_t, kSecretBytes>;

enum class Kind : uint16_t {
  kHello = 1,  // payload: Hello
  kRefused,    // payload: the reason, sent back on a connection before closing it
  kTable,      // root -> rank: every rank's listening address
  kData,       // user send/recv
  kAllGather,  // one ring step; aux = the rank whose block this is
  kBarrier,    // arrive (rank -> root) and release (root -> rank)
  kAbort,      // a collective step failed; aux = ErrorCategory, tag = the rank that found out, payload = why
  // A rank whose step timed out asks the root who is missing (tag: 0 the rendezvous, n barrier n);
  // the root answers back on the same connection.
  kStatusRequest,
  kStatus,
  // A rank closes this bootstrap on purpose (its communicator is destroyed or aborted): its departure that
  // follows is no failure. Sent either way on every open connection.
  kGoodbye,
  // A rank aborted its communicator: its bootstrap takes part in nothing more (Bootstrap::abort is for
  // good), so the peers end their waits on it now and say it aborted. The connection stays open.
  kAborted,
};
constexpr uint16_t kLastKind = static_cast<uint16_t>(Kind::kAborted);

struct Header {
  Kind kind = Kind::kHello;
  uint32_t source = 0;
  uint32_t aux = 0;
  uint64_t tag = 0;
  uint64_t length = 0;
};

using HeaderBytes = std::array<uint8_t, kHeaderBytes>;
HeaderBytes encodeHeader(const Header& header);

// Thrown for bytes that are not a valid frame; the connection is refused or dropped.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Header decodeHeader(const uint8_t* bytes);  // throws ProtocolError

struct Hello {
  Secret secret{};
  uint32_t worldSize = 0;
  net::SocketAddress listenAddress;  // where the sender accepts connections
};
constexpr size_t kHelloBytes = kSecretBytes + 4 + 4 + net::SocketAddress::kPackedBytes;

std::vector<uint8_t> encodeHello(const Hello& hello);
Hello decodeHello(const std::vector<uint8_t>& payload);  // throws ProtocolError

// Compares secrets in time independent of where they differ.
bool sameSecret(const Secret& a, const Secret& b);

// Reassembles frames from a byte stream that arrives in arbitrary pieces.
class FrameReader {
 public:
  // Consumes bytes until one frame is complete (then stops) or `size` is used up; returns how many
  // it took. `maxPayload` bounds the length field of the frame being read.
  size_t consume(const uint8_t* data, size_t size, uint64_t maxPayload);
  bool ready() const { return header_.has_value() && payload_.size() == header_->length; }
  bool idle() const { return headerFilled_ == 0 && !header_; }
  // The complete frame; the reader starts over.
  std::pair<Header, std::vector<uint8_t>> take();

 private:
  HeaderBytes headerBytes_{};
  size_t headerFilled_ = 0;
  std::optional<Header> header_;
  std::vector<uint8_t> payload_;
};

}  // namespace loom::wire
