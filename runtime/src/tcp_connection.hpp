#pragma once

// The TCP transport's wire format, and its connection over two sockets that are already set up.
// connectTcp (connection_factory.hpp) is the way in for the runtime; tests use what is here to
// play one side of the protocol by hand (a peer that never answers, a damaged frame, a stranger).
//
// Each pair of ranks has two streams, one per direction: a rank connects to its peer's listener for
// the data it sends, and accepts the peer's connection for the data it receives. The connector's
// first bytes are a hello with a random token that it sent the peer through the (authenticated)
// bootstrap before, so the acceptor can tell its peer from anyone else who connects. Then frames
// flow from connector to acceptor, and the acceptor answers flush frames with acks on the same
// stream.
//
// A rank's Connection object owns both its sending stream and the thread that receives the peer's
// stream, so destroying it also ends the peer's connection to this rank (the peer's next write or
// flush fails with a Transport error): both ranks should be done (flushed, then a barrier) before
// either destroys its connection, as with any transport whose receiving side holds resources.

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "loom/connection.hpp"
#include "socket.hpp"

namespace loom::tcp {

constexpr size_t kTokenBytes = 16;
using Token = std::array<uint8_t, kTokenBytes>;
Token randomToken();

// What each side of a setup sends the other through the bootstrap: where it listens, and the token
// it will present when it connects to the other's listener.
struct Endpoint {
  net::SocketAddress listener;
  Token token{};
};
std::vector<uint8_t> encodeEndpoint(const Endpoint& endpoint);
// An InvalidArgument error naming `what` for a damaged record.
Endpoint decodeEndpoint(std::span<const uint8_t> bytes, const std::string& what);

// The connector's first bytes: magic, token, its rank, the acceptor's rank.
constexpr uint32_t kHelloMagic = 0x4c54434fu;
constexpr size_t kHelloBytes = 4 + kTokenBytes + 4 + 4;
std::vector<uint8_t> encodeHello(const Token& token, int fromRank, int toRank);

// Every frame starts with a fixed header; a write's `bytes` of data follow it. The peer names a
// registration of the receiving process by id (memory_table.hpp), never an address.
// A goodbye is the last frame of a connection that closes on purpose: a stream that ends without one
// is a failed link (its process died, or the network cut it).
enum class FrameKind : uint8_t { kWrite = 1, kValue = 2, kFlush = 3, kGoodbye = 4 };
struct FrameHeader {
  FrameKind kind = FrameKind::kWrite;
  uint64_t id = 0;        // write, value: the target registration
  uint64_t offset = 0;    // write, value: bytes into it
  uint64_t argument = 0;  // write: bytes; value: the value; flush: operations posted so far
};
constexpr size_t kFrameHeaderBytes = 1 + 8 + 8 + 8;
std::vector<uint8_t> encodeFrame(const FrameHeader& header);
// Any kind byte decodes; the receiver refuses unknown kinds.
FrameHeader decodeFrame(std::span<const uint8_t, kFrameHeaderBytes> bytes);
// A flush's answer: the `argument` of the flush frame, 8 bytes little-endian.
constexpr size_t kAckBytes = 8;

// The connection over `outgoing` (connected to the peer's listener, hello sent) and `incoming`
// (accepted and authenticated). It starts the receiving thread at once. A blocked send gives up
// when it makes no progress for `sendTimeoutMs`.
std::shared_ptr<Connection> makeConnection(int localRank, int remoteRank, net::Socket outgoing, net::Socket incoming,
                                           int64_t sendTimeoutMs);

}  // namespace loom::tcp
