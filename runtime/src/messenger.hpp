#pragma once

// The bootstrap's connections: one listening socket, one outgoing connection per peer this rank
// has sent to, and the incoming connections peers opened to it. Every connection starts with a
// hello that carries the job's secret; the acceptor refuses (and logs) anything else. Messages are
// framed (wire.hpp) and land in a mailbox keyed by (kind, sender, tag) until a step takes them.
//
// There is no background thread: progress() runs a poll() loop that accepts, reads and writes on
// every socket while the caller waits for something, so two ranks that send to each other at the
// same time never block each other, and nothing runs once the object is gone.

#include <poll.h>

#include <compare>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "deadline.hpp"
#include "loom/error.hpp"
#include "socket.hpp"
#include "wire.hpp"

namespace loom {

struct Message {
  uint32_t aux = 0;
  std::vector<uint8_t> payload;
};

// Another rank's word that the current collective step failed, and why.
struct Abort {
  ErrorCategory category;
  std::string detail;
  int origin;  // the rank that found out (the sender may only pass it on)
  std::string text() const { return detail + " (reported by rank " + std::to_string(origin) + ")"; }
};

class Messenger {
 public:
  // `helloTimeoutMs` bounds how long a connection may stay open without a valid hello.
  Messenger(int rank, int worldSize, const wire::Secret& secret, net::Socket listener, net::SocketAddress listenAddress,
            int64_t helloTimeoutMs);
  ~Messenger();
  Messenger(const Messenger&) = delete;
  Messenger& operator=(const Messenger&) = delete;

  int rank() const { return rank_; }
  const net::SocketAddress& listenAddress() const { return listenAddress_; }

  // Where `peer` accepts connections (from the rank table, or from its hello at the root).
  void setPeerAddress(int peer, const net::SocketAddress& address);
  const std::optional<net::SocketAddress>& peerAddress(int peer) const;
  // The listening address a peer announced in its hello, once its connection is accepted.
  const std::optional<net::SocketAddress>& announcedAddress(int peer) const;
  bool connectedFrom(int peer) const;  // an accepted, authenticated connection from `peer` exists or existed

  // Uses an already connected socket as the connection to `peer` (its hello is queued first).
  void attachOutgoing(int peer, net::Socket socket);
  // Queues one message for `peer`, connecting first (before `deadline`) when there is no connection.
  void post(int peer, wire::Kind kind, uint64_t tag, uint32_t aux, std::span<const uint8_t> payload,
            const Deadline& deadline);
  // A message to this rank itself goes straight to the mailbox.
  void deliverLocal(wire::Kind kind, uint64_t tag, std::span<const uint8_t> payload);
  bool flushed(int peer) const;
  bool allFlushed() const;

  // The interrupt check runs about every 100 ms while progress() waits, and may throw.
  void setInterruptCheck(std::function<void()> check) { interruptCheck_ = std::move(check); }
  // Runs the event loop until done() returns true (true) or the deadline passes (false).
  bool progress(const Deadline& deadline, const std::function<bool()>& done);

  bool has(wire::Kind kind, int peer, uint64_t tag) const;
  std::optional<Message> take(wire::Kind kind, int peer, uint64_t tag);
  std::vector<uint64_t> waitingTags(wire::Kind kind, int peer) const;  // for diagnostics

  // The peers whose connection (either way) was closed by their side, after one look at the sockets
  // without waiting: a process that exited or was killed closes them all; and those that aborted.
  std::vector<int> departedPeers();
  // Of those, the ones that announced an abort of their communicator (announceAbort).
  std::vector<int> abortedPeers() const;
  // The peers whose link was lost (nothing acknowledged within LOOM_LINK_TIMEOUT_MS, no route): the text
  // names the link's addresses and interface. They count among lostPeers.
  std::map<int, std::string> lostLinks() const;
  // Takes what has arrived, without waiting (an announced failure, a goodbye).
  void lookOnce() { pollOnce(0); }
  // Of those, the ones that did not say goodbye first (sayGoodbye): a process that was killed or crashed.
  std::vector<int> lostPeers();
  // Tells every peer this rank is connected to, either way, that it is leaving on purpose; waits up to
  // `waitMs` for the words to go out. Called as the bootstrap closes.
  void sayGoodbye(int64_t waitMs);
  // Why nothing more will arrive from `peer`, if that is known.
  std::optional<std::string> peerFailure(int peer) const;
  // Why the connection to `peer` cannot take more data, if it cannot.
  std::optional<std::string> sendFailure(int peer) const;
  // Status requests (kStatusRequest) are answered with provider(tag); a rank without a provider does
  // not answer. The reply goes back on the connection the request came in on.
  void setStatusProvider(std::function<std::string(uint64_t tag)> provider) { statusProvider_ = std::move(provider); }
  // Asks `peer` over the open connection to it; false when there is none.
  bool requestStatus(int peer, uint64_t tag);
  bool hasStatus(uint64_t tag) const { return statuses_.count(tag) != 0; }
  std::optional<std::string> takeStatus(uint64_t tag);

  // The first abort another rank sent: the step failed elsewhere.
  const std::optional<Abort>& abortReceived() const { return abort_; }

 private:
  struct Inbound;
  struct Outbound {
    net::Socket socket;
    std::vector<uint8_t> buffer;  // framed bytes not yet written
    size_t offset = 0;
    wire::FrameReader reader;  // what may come back: a refusal, answers to status requests
    bool closed = false;
    Deadline::Clock::time_point closedAt;
    std::string failure;
  };
  enum class InState { kNone, kOpen, kClosed };
  struct Peer {
    std::optional<net::SocketAddress> address;
    std::optional<net::SocketAddress> announced;
    InState in = InState::kNone;
    net::SocketAddress inRemote;
    std::string inFailure;
    Outbound out;
    bool saidGoodbye = false;  // it is leaving on purpose (kGoodbye)
    bool aborted = false;      // it aborted its communicator (kAborted): departed, though still connected
    std::string lostLink;      // the link to it was lost (link_liveness.hpp): what the socket said
  };
  struct MailKey {
    wire::Kind kind;
    int peer;
    uint64_t tag;
    auto operator<=>(const MailKey&) const = default;
  };

  std::string name(int peer) const { return "rank " + std::to_string(peer); }
  void queueFrame(int peer, const wire::Header& header, std::span<const uint8_t> payload);
  void pollOnce(int timeoutMs);
  void acceptPending();
  void readInbound(Inbound& connection);
  void dispatch(Inbound& connection, const wire::Header& header, std::vector<uint8_t> payload);
  void authenticate(Inbound& connection, const wire::Header& header, const std::vector<uint8_t>& payload);
  void refuse(Inbound& connection, const std::string& reason);
  void answerStatus(Inbound& connection, uint64_t tag);
  void sendBack(Inbound& connection, wire::Kind kind, uint64_t tag, const std::string& text);
  void dropAuthenticated(Inbound& connection, const std::string& reason);
  void writeOutbound(int peer);
  void readOutbound(int peer);
  void closeOutbound(int peer, const std::string& failure);
  void noteLostLink(int peer, const std::string& what);
  void expireHellos();

  int rank_;
  int worldSize_;
  wire::Secret secret_;
  net::Socket listener_;
  net::SocketAddress listenAddress_;
  int64_t helloTimeoutMs_;
  std::vector<Peer> peers_;
  std::vector<int> outgoing_;  // peers with an open outgoing socket
  std::vector<std::unique_ptr<Inbound>> inbound_;
  size_t unidentified_ = 0;  // inbound connections still waiting for their hello
  std::map<MailKey, std::deque<Message>> mailbox_;
  std::optional<Abort> abort_;
  std::function<std::string(uint64_t)> statusProvider_;
  std::function<void()> interruptCheck_;
  std::map<uint64_t, std::string> statuses_;
  std::vector<uint8_t> staging_;
  std::vector<pollfd> pollFds_;
};

}  // namespace loom
