#include "messenger.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "log.hpp"

namespace loom {
namespace {

// Connections that have not said hello yet. Beyond this many, further connections wait in the
// kernel's backlog until hellos come in, so a flood of strangers cannot exhaust descriptors and a
// burst of legitimate ranks is slowed down, not refused.
constexpr size_t kMaxUnidentified = 256;
// A refusal or a status answer is at most a line of text.
constexpr uint64_t kMaxAnswerBytes = 4096;
// How long the loop sleeps at most before it looks at deadlines again.
constexpr int kPollSliceMs = 100;
constexpr size_t kStagingBytes = 64 * 1024;
// Reads per connection per wake-up, so one busy sender cannot starve the others.
constexpr int kReadsPerWake = 16;
// A peer's outgoing connection can close just before its last message is read from the other
// connection (it finished and went away); only a close that stays unexplained this long is a failure.
constexpr auto kCloseGrace = std::chrono::milliseconds(1000);

}  // namespace

struct Messenger::Inbound {
  net::Socket socket;
  net::SocketAddress remote;
  wire::FrameReader reader;
  int rank = -1;  // -1 until its hello is accepted
  Deadline helloDeadline;
  bool done = false;

  Inbound(net::Socket s, net::SocketAddress r, int64_t helloTimeoutMs)
      : socket(std::move(s)), remote(r), helloDeadline(helloTimeoutMs) {}
};

Messenger::Messenger(int rank, int worldSize, const wire::Secret& secret, net::Socket listener,
                     net::SocketAddress listenAddress, int64_t helloTimeoutMs)
    : rank_(rank),
      worldSize_(worldSize),
      secret_(secret),
      listener_(std::move(listener)),
      listenAddress_(listenAddress),
      helloTimeoutMs_(helloTimeoutMs),
      peers_(static_cast<size_t>(worldSize)),
      staging_(kStagingBytes) {
  peers_[rank].address = listenAddress;
}

Messenger::~Messenger() = default;

void Messenger::setPeerAddress(int peer, const net::SocketAddress& address) { peers_[peer].address = address; }

const std::optional<net::SocketAddress>& Messenger::peerAddress(int peer) const { return peers_[peer].address; }

const std::optional<net::SocketAddress>& Messenger::announcedAddress(int peer) const { return peers_[peer].announced; }

bool Messenger::connectedFrom(int peer) const { return peers_[peer].in != InState::kNone; }

void Messenger::queueFrame(int peer, const wire::Header& header, std::span<const uint8_t> payload) {
  Outbound& out = peers_[peer].out;
  if (out.offset == out.buffer.size()) {
    out.buffer.clear();
    out.offset = 0;
  }
  wire::HeaderBytes bytes = wire::encodeHeader(header);
  out.buffer.insert(out.buffer.end(), bytes.begin(), bytes.end());
  out.buffer.insert(out.buffer.end(), payload.begin(), payload.end());
}

void Messenger::attachOutgoing(int peer, net::Socket socket) {
  Outbound& out = peers_[peer].out;
  out.socket = std::move(socket);
  outgoing_.push_back(peer);
  wire::Hello hello;
  hello.secret = secret_;
  hello.worldSize = static_cast<uint32_t>(worldSize_);
  hello.listenAddress = listenAddress_;
  std::vector<uint8_t> payload = wire::encodeHello(hello);
  wire::Header header;
  header.kind = wire::Kind::kHello;
  header.source = static_cast<uint32_t>(rank_);
  header.length = payload.size();
  queueFrame(peer, header, payload);
}

void Messenger::post(int peer, wire::Kind kind, uint64_t tag, uint32_t aux, std::span<const uint8_t> payload,
                     const Deadline& deadline) {
  Peer& state = peers_[peer];
  if (!state.out.failure.empty())
    throw Error(ErrorCategory::kTransport, "cannot send to " + name(peer) + ": " + state.out.failure);
  if (state.out.closed) {
    throw Error(ErrorCategory::kTransport,
                "cannot send to " + name(peer) + ": it closed the connection (did it exit?)");
  }
  if (!state.out.socket.valid()) {
    if (!state.address) throw Error(ErrorCategory::kTransport, "no address known for " + name(peer));
    attachOutgoing(peer, net::Socket::connect(*state.address, deadline, false, name(peer)));
  }
  wire::Header header;
  header.kind = kind;
  header.source = static_cast<uint32_t>(rank_);
  header.aux = aux;
  header.tag = tag;
  header.length = payload.size();
  queueFrame(peer, header, payload);
  writeOutbound(peer);
}

void Messenger::deliverLocal(wire::Kind kind, uint64_t tag, std::span<const uint8_t> payload) {
  mailbox_[MailKey{kind, rank_, tag}].push_back(Message{0, std::vector<uint8_t>(payload.begin(), payload.end())});
}

bool Messenger::flushed(int peer) const {
  const Outbound& out = peers_[peer].out;
  return out.offset == out.buffer.size();
}

bool Messenger::allFlushed() const {
  return std::all_of(outgoing_.begin(), outgoing_.end(), [&](int peer) { return flushed(peer); });
}

bool Messenger::has(wire::Kind kind, int peer, uint64_t tag) const {
  auto found = mailbox_.find(MailKey{kind, peer, tag});
  return found != mailbox_.end() && !found->second.empty();
}

std::optional<Message> Messenger::take(wire::Kind kind, int peer, uint64_t tag) {
  auto found = mailbox_.find(MailKey{kind, peer, tag});
  if (found == mailbox_.end() || found->second.empty()) return std::nullopt;
  Message message = std::move(found->second.front());
  found->second.pop_front();
  if (found->second.empty()) mailbox_.erase(found);
  return message;
}

std::vector<uint64_t> Messenger::waitingTags(wire::Kind kind, int peer) const {
  std::vector<uint64_t> tags;
  for (const auto& [key, queue] : mailbox_) {
    if (key.kind == kind && key.peer == peer && !queue.empty()) tags.push_back(key.tag);
  }
  return tags;
}

std::optional<std::string> Messenger::peerFailure(int peer) const {
  const Peer& state = peers_[peer];
  if (!state.inFailure.empty()) return state.inFailure;
  if (state.in == InState::kClosed) return name(peer) + " closed its connection (did it exit or fail?)";
  if (!state.out.failure.empty()) return name(peer) + " " + state.out.failure;
  if (state.out.closed && state.in == InState::kNone && Deadline::Clock::now() - state.out.closedAt > kCloseGrace) {
    return name(peer) + " closed the connection before sending anything (did it exit or fail?)";
  }
  return std::nullopt;
}

std::optional<std::string> Messenger::sendFailure(int peer) const {
  const Outbound& out = peers_[peer].out;
  if (!out.failure.empty()) return name(peer) + " " + out.failure;
  if (out.closed) return name(peer) + " closed the connection (did it exit or fail?)";
  return std::nullopt;
}

bool Messenger::progress(const Deadline& deadline, const std::function<bool()>& done) {
  // The check may be costly (the Python one takes the GIL), so it runs by the clock, not per wake-up.
  auto nextCheck = Deadline::Clock::now() + std::chrono::milliseconds(kPollSliceMs);
  while (true) {
    if (done()) return true;
    if (deadline.expired()) return false;
    pollOnce(std::min(deadline.remainingMs(), kPollSliceMs));
    if (interruptCheck_ && Deadline::Clock::now() >= nextCheck) {
      interruptCheck_();
      nextCheck = Deadline::Clock::now() + std::chrono::milliseconds(kPollSliceMs);
    }
  }
}

void Messenger::pollOnce(int timeoutMs) {
  pollFds_.clear();
  pollFds_.push_back(pollfd{unidentified_ < kMaxUnidentified ? listener_.fd() : -1, POLLIN, 0});
  const size_t inboundCount = inbound_.size();
  for (const auto& connection : inbound_) pollFds_.push_back(pollfd{connection->socket.fd(), POLLIN, 0});
  const std::vector<int> outgoing = outgoing_;
  for (int peer : outgoing) {
    short events = POLLIN;
    if (!flushed(peer)) events |= POLLOUT;
    pollFds_.push_back(pollfd{peers_[peer].out.socket.fd(), events, 0});
  }
  int ready = ::poll(pollFds_.data(), pollFds_.size(), timeoutMs);
  if (ready < 0) {
    if (errno == EINTR) return;
    throw Error(ErrorCategory::kSystem, std::string("poll: ") + std::strerror(errno));
  }
  if (ready > 0) {
    for (size_t i = 0; i < inboundCount; ++i) {
      if (pollFds_[1 + i].revents != 0) readInbound(*inbound_[i]);
    }
    for (size_t i = 0; i < outgoing.size(); ++i) {
      short revents = pollFds_[1 + inboundCount + i].revents;
      int peer = outgoing[i];
      if ((revents & POLLOUT) != 0) writeOutbound(peer);
      if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0 && peers_[peer].out.socket.valid()) readOutbound(peer);
    }
    if ((pollFds_[0].revents & POLLIN) != 0) acceptPending();
  }
  expireHellos();
  std::erase_if(inbound_, [](const std::unique_ptr<Inbound>& connection) { return connection->done; });
  std::erase_if(outgoing_, [&](int peer) { return !peers_[peer].out.socket.valid(); });
}

void Messenger::acceptPending() {
  while (unidentified_ < kMaxUnidentified) {
    net::SocketAddress remote;
    net::Socket socket = listener_.accept(&remote);
    if (!socket.valid()) return;
    inbound_.push_back(std::make_unique<Inbound>(std::move(socket), remote, helloTimeoutMs_));
    ++unidentified_;
    // A rank sends its hello right after connecting: it is usually there already.
    readInbound(*inbound_.back());
  }
}

void Messenger::readInbound(Inbound& connection) {
  for (int reads = 0; reads < kReadsPerWake && !connection.done; ++reads) {
    std::optional<size_t> got;
    try {
      got = connection.socket.readSome(staging_.data(), staging_.size(),
                                       connection.rank >= 0 ? name(connection.rank) : connection.remote.toString());
    } catch (const Error& error) {
      got = 0;  // a failed read ends the connection like a close does
      noteLostLink(connection.rank, error.what());
    }
    if (!got) return;
    if (*got == 0) {
      if (connection.rank < 0) {
        refuse(connection,
               connection.reader.idle() ? "closed before identifying itself" : "closed in the middle of its hello");
      } else if (!connection.reader.idle()) {
        dropAuthenticated(connection, "closed the connection in the middle of a message");
      } else {
        peers_[connection.rank].in = InState::kClosed;
        connection.socket.reset();
        connection.done = true;
      }
      return;
    }
    size_t offset = 0;
    while (offset < *got && !connection.done) {
      try {
        uint64_t limit = connection.rank < 0 ? wire::kHelloBytes : wire::kMaxPayloadBytes;
        offset += connection.reader.consume(staging_.data() + offset, *got - offset, limit);
        if (connection.reader.ready()) {
          auto [header, payload] = connection.reader.take();
          dispatch(connection, header, std::move(payload));
        }
      } catch (const wire::ProtocolError& error) {
        if (connection.rank < 0) {
          refuse(connection, error.what());
        } else {
          dropAuthenticated(connection, error.what());
        }
      }
    }
  }
}

void Messenger::dispatch(Inbound& connection, const wire::Header& header, std::vector<uint8_t> payload) {
  if (connection.rank < 0) {
    authenticate(connection, header, payload);
    return;
  }
  if (header.source != static_cast<uint32_t>(connection.rank)) {
    throw wire::ProtocolError("message claims to come from rank " + std::to_string(header.source));
  }
  switch (header.kind) {
    case wire::Kind::kStatusRequest:
      answerStatus(connection, header.tag);
      return;
    case wire::Kind::kHello:
    case wire::Kind::kRefused:
    case wire::Kind::kStatus:
      throw wire::ProtocolError("unexpected message kind " + std::to_string(static_cast<int>(header.kind)));
    case wire::Kind::kGoodbye:
      peers_[connection.rank].saidGoodbye = true;
      return;
    case wire::Kind::kAborted:
      peers_[connection.rank].aborted = true;
      return;
    case wire::Kind::kAbort: {
      ErrorCategory category = header.aux <= static_cast<uint32_t>(ErrorCategory::kSystem)
                                   ? static_cast<ErrorCategory>(header.aux)
                                   : ErrorCategory::kTransport;
      int origin = header.tag < static_cast<uint64_t>(worldSize_) ? static_cast<int>(header.tag) : connection.rank;
      if (!abort_) abort_ = Abort{category, std::string(payload.begin(), payload.end()), origin};
      return;
    }
    default:
      mailbox_[MailKey{header.kind, connection.rank, header.tag}].push_back(Message{header.aux, std::move(payload)});
  }
}

void Messenger::authenticate(Inbound& connection, const wire::Header& header, const std::vector<uint8_t>& payload) {
  if (header.kind != wire::Kind::kHello) {
    throw wire::ProtocolError("the first message is of kind " + std::to_string(static_cast<int>(header.kind)) +
                              ", not a hello");
  }
  wire::Hello hello = wire::decodeHello(payload);
  if (!wire::sameSecret(hello.secret, secret_)) throw wire::ProtocolError("wrong secret (another job?)");
  if (hello.worldSize != static_cast<uint32_t>(worldSize_)) {
    throw wire::ProtocolError("it runs with " + std::to_string(hello.worldSize) + " ranks, this job has " +
                              std::to_string(worldSize_));
  }
  if (header.source >= static_cast<uint32_t>(worldSize_)) {
    throw wire::ProtocolError("rank " + std::to_string(header.source) + " is not in 0.." +
                              std::to_string(worldSize_ - 1));
  }
  int peer = static_cast<int>(header.source);
  if (peer == rank_) throw wire::ProtocolError("it claims to be rank " + std::to_string(peer) + ", this rank");
  if (peers_[peer].in != InState::kNone) {
    throw wire::ProtocolError("rank " + std::to_string(peer) + " is already connected (from " +
                              peers_[peer].inRemote.toString() + ")");
  }
  connection.rank = peer;
  --unidentified_;
  peers_[peer].in = InState::kOpen;
  peers_[peer].inRemote = connection.remote;
  peers_[peer].announced = hello.listenAddress;
}

bool Messenger::requestStatus(int peer, uint64_t tag) {
  Outbound& out = peers_[peer].out;
  if (!out.socket.valid()) return false;
  wire::Header header;
  header.kind = wire::Kind::kStatusRequest;
  header.source = static_cast<uint32_t>(rank_);
  header.tag = tag;
  queueFrame(peer, header, {});
  writeOutbound(peer);
  return true;
}

std::optional<std::string> Messenger::takeStatus(uint64_t tag) {
  auto found = statuses_.find(tag);
  if (found == statuses_.end()) return std::nullopt;
  std::string status = std::move(found->second);
  statuses_.erase(found);
  return status;
}

void Messenger::answerStatus(Inbound& connection, uint64_t tag) {
  if (!statusProvider_) return;
  sendBack(connection, wire::Kind::kStatus, tag, statusProvider_(tag));
}

void Messenger::sendBack(Inbound& connection, wire::Kind kind, uint64_t tag, const std::string& text) {
  // Short answers on a connection that otherwise carries nothing this way: they fit in the socket
  // buffer, so a non-blocking write goes through whole (or the answer is dropped).
  wire::Header header;
  header.kind = kind;
  header.source = static_cast<uint32_t>(rank_);
  header.tag = tag;
  header.length = text.size();
  std::vector<uint8_t> frame(wire::kHeaderBytes + text.size());
  wire::HeaderBytes bytes = wire::encodeHeader(header);
  std::copy(bytes.begin(), bytes.end(), frame.begin());
  std::copy(text.begin(), text.end(), frame.begin() + wire::kHeaderBytes);
  try {
    connection.socket.writeSome(frame.data(), frame.size(), connection.remote.toString());
  } catch (const Error&) {
  }
}

void Messenger::refuse(Inbound& connection, const std::string& reason) {
  --unidentified_;
  logWarning("bootstrap rank " + std::to_string(rank_) + ": refused a connection from " + connection.remote.toString() +
             ": " + reason);
  // Tell a Loom peer why, so that it fails at once with the reason instead of timing out.
  sendBack(connection, wire::Kind::kRefused, 0, reason);
  ::shutdown(connection.socket.fd(), SHUT_WR);
  connection.socket.reset();
  connection.done = true;
}

void Messenger::dropAuthenticated(Inbound& connection, const std::string& reason) {
  logWarning("bootstrap rank " + std::to_string(rank_) + ": dropped the connection from " + name(connection.rank) +
             " (" + connection.remote.toString() + "): " + reason);
  peers_[connection.rank].in = InState::kClosed;
  peers_[connection.rank].inFailure = name(connection.rank) + " sent a malformed message: " + reason;
  connection.socket.reset();
  connection.done = true;
}

void Messenger::writeOutbound(int peer) {
  Outbound& out = peers_[peer].out;
  while (out.socket.valid() && out.offset < out.buffer.size()) {
    std::optional<size_t> sent;
    try {
      sent = out.socket.writeSome(out.buffer.data() + out.offset, out.buffer.size() - out.offset, name(peer));
    } catch (const Error& error) {
      closeOutbound(peer, std::string("failed: ") + error.what());
      return;
    }
    if (!sent) return;
    out.offset += *sent;
  }
}

void Messenger::readOutbound(int peer) {
  Outbound& out = peers_[peer].out;
  std::optional<size_t> got;
  try {
    got = out.socket.readSome(staging_.data(), staging_.size(), name(peer));
  } catch (const Error& error) {
    noteLostLink(peer, error.what());
    closeOutbound(peer, std::string("failed: ") + error.what());
    return;
  }
  if (!got) return;
  if (*got == 0) {
    closeOutbound(peer, "");
    return;
  }
  try {
    size_t offset = 0;
    while (offset < *got) {
      offset += out.reader.consume(staging_.data() + offset, *got - offset, kMaxAnswerBytes);
      if (!out.reader.ready()) continue;
      auto [header, payload] = out.reader.take();
      if (header.kind == wire::Kind::kGoodbye) {
        peers_[peer].saidGoodbye = true;
        continue;
      }
      if (header.kind == wire::Kind::kAborted) {
        peers_[peer].aborted = true;
        continue;
      }
      if (header.kind == wire::Kind::kStatus) {
        statuses_[header.tag] = std::string(payload.begin(), payload.end());
        continue;
      }
      if (header.kind != wire::Kind::kRefused) throw wire::ProtocolError("it sent a message on the wrong connection");
      closeOutbound(peer, "refused this rank: " + std::string(payload.begin(), payload.end()));
      return;
    }
  } catch (const wire::ProtocolError& error) {
    closeOutbound(peer, std::string("broke the protocol: ") + error.what());
  }
}

std::vector<int> Messenger::departedPeers() {
  pollOnce(0);
  std::vector<int> departed;
  for (int peer = 0; peer < worldSize_; ++peer) {
    const Peer& state = peers_[peer];
    if (peer != rank_ && (state.in == InState::kClosed || state.out.closed || state.aborted)) departed.push_back(peer);
  }
  return departed;
}

void Messenger::noteLostLink(int peer, const std::string& what) {
  if (peer < 0 || peer >= worldSize_ || what.find("the link to ") == std::string::npos) return;
  if (peers_[peer].lostLink.empty()) peers_[peer].lostLink = what;
}

std::map<int, std::string> Messenger::lostLinks() const {
  std::map<int, std::string> lost;
  for (int peer = 0; peer < worldSize_; ++peer) {
    if (!peers_[peer].lostLink.empty()) lost[peer] = peers_[peer].lostLink;
  }
  return lost;
}

std::vector<int> Messenger::abortedPeers() const {
  std::vector<int> aborted;
  for (int peer = 0; peer < worldSize_; ++peer) {
    if (peer != rank_ && peers_[peer].aborted) aborted.push_back(peer);
  }
  return aborted;
}

std::vector<int> Messenger::lostPeers() {
  std::vector<int> lost;
  for (int peer : departedPeers()) {
    if (!peers_[peer].saidGoodbye && !peers_[peer].aborted) lost.push_back(peer);
  }
  return lost;
}

void Messenger::sayGoodbye(int64_t waitMs) {
  wire::Header header;
  header.kind = wire::Kind::kGoodbye;
  header.source = static_cast<uint32_t>(rank_);
  for (int peer = 0; peer < worldSize_; ++peer) {
    if (peer == rank_ || !peers_[peer].out.socket.valid() || peers_[peer].out.closed) continue;
    queueFrame(peer, header, {});
    writeOutbound(peer);
  }
  // A peer that only ever sent to this rank hears it on its own connection, as a status answer goes back.
  for (auto& connection : inbound_) {
    if (connection->rank >= 0 && !connection->done) sendBack(*connection, wire::Kind::kGoodbye, 0, "");
  }
  progress(Deadline(waitMs), [this] { return allFlushed(); });
}

void Messenger::closeOutbound(int peer, const std::string& failure) {
  Outbound& out = peers_[peer].out;
  out.socket.reset();
  out.closed = true;
  out.closedAt = Deadline::Clock::now();
  if (out.failure.empty()) out.failure = failure;
  if (out.failure.empty() && !flushed(peer)) {
    out.failure = "closed the connection with " + std::to_string(out.buffer.size() - out.offset) +
                  " bytes unsent (did it exit or fail?)";
  }
}

void Messenger::expireHellos() {
  for (auto& connection : inbound_) {
    if (!connection->done && connection->rank < 0 && connection->helloDeadline.expired()) {
      refuse(*connection, "sent no valid hello within " + std::to_string(helloTimeoutMs_) + " ms");
    }
  }
}

}  // namespace loom
