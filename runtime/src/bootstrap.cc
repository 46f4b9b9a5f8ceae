#include "loom/bootstrap.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "deadline.hpp"
#include "environment.hpp"
#include "interface_choice.hpp"
#include "listener_registry.hpp"
#include "loom/error.hpp"
#include "loom/rank_list.hpp"
#include "messenger.hpp"
#include "socket.hpp"
#include "wire.hpp"

namespace loom {
namespace {

constexpr int64_t kMaxTimeoutMs = 24ll * 3600 * 1000;
// Telling the other ranks that a step failed is best effort and must not hold the error up long.
constexpr int64_t kAbortTimeoutMs = 1000;
// A rank sends its hello right after it connects; a connection silent for this long is a stranger
// and gives its descriptor back.
constexpr int64_t kHelloTimeoutMs = 10000;
// How long a rank whose step timed out waits for the root to say who is missing. The root answers
// at once if it is inside a bootstrap call; if it is not, that is the answer.
constexpr int64_t kStatusGraceMs = 500;
// Status request tags: 0 asks about the rendezvous, n about barrier n.
constexpr uint64_t kRendezvousStatus = 0;
static_assert(kMaxBootstrapMessageBytes == wire::kMaxPayloadBytes);

std::string hasOrHave(const std::vector<int>& ranks) { return ranks.size() == 1 ? " has" : " have"; }

int64_t checkedTimeout(std::optional<int64_t> timeoutMs) {
  if (!timeoutMs) return defaultBootstrapTimeoutMs();
  if (*timeoutMs < 1 || *timeoutMs > kMaxTimeoutMs) {
    throw Error(ErrorCategory::kInvalidArgument, "bootstrap timeout: expected 1 to " + std::to_string(kMaxTimeoutMs) +
                                                     " ms, got " + std::to_string(*timeoutMs));
  }
  return *timeoutMs;
}

// Rank 0 listens where the UniqueId says: on the socket UniqueId::create or the launcher left for
// it, else on a socket it binds now.
net::Socket rootListener(const net::SocketAddress& address) {
  net::Socket parked = takeParkedListener(address);
  if (parked.valid()) return parked;
  try {
    return net::Socket::listen(address);
  } catch (const Error& error) {
    // The address may name this host in a way it cannot bind (a name that resolves to a NAT or
    // load-balancer address): then listen on every interface at that port.
    try {
      return net::Socket::listen(address.wildcard());
    } catch (const Error&) {
      throw error;
    }
  }
}

}  // namespace

int64_t defaultBootstrapTimeoutMs() {
  std::optional<std::string> text = processEnvironment("LOOM_BOOTSTRAP_TIMEOUT_MS");
  if (!text) return kDefaultBootstrapTimeoutMs;
  return parseInteger(*text, 1, kMaxTimeoutMs, "LOOM_BOOTSTRAP_TIMEOUT_MS");
}

// How long a closing bootstrap waits for its goodbyes to go out.
constexpr int64_t kGoodbyeWaitMs = 100;

struct Bootstrap::Impl {
  int rank;
  int worldSize;
  int64_t timeoutMs;
  UniqueId id;
  net::SocketAddress rootAddress;
  std::unique_ptr<Messenger> messenger;
  uint64_t allGatherCount = 0;
  uint64_t barrierCount = 0;
  std::optional<Error> broken;  // the failure that left the collectives out of step
  bool inRendezvous = false;    // root: what status requests are about
  uint64_t barrierInProgress = 0;
  InterruptCheck interruptCheck;
  std::shared_ptr<std::atomic<bool>> aborted = std::make_shared<std::atomic<bool>>(false);
  std::mutex mutex;  // one call at a time per object (Python threads may share one)
  bool saidGoodbye = false;

  Impl(int rank, int worldSize, const UniqueId& id, int64_t timeoutMs)
      : rank(rank),
        worldSize(worldSize),
        timeoutMs(timeoutMs),
        id(id),
        rootAddress(*net::SocketAddress::unpack(id.packedAddress().data())) {}

  // The peers hear that this rank leaves on purpose, so that its closed connections are no failure to them
  // (Bootstrap::lostPeersIfIdle); best effort, briefly.
  ~Impl() { sayGoodbye(); }
  // What `ask(messenger)` answers, under the lock (waiting for a call in flight); empty without a messenger.
  template <typename Answer>
  auto askMessenger(const Answer& ask) -> decltype(ask(*messenger)) {
    std::lock_guard lock(mutex);
    return messenger ? ask(*messenger) : decltype(ask(*messenger)){};
  }
  // The same when no other call holds the bootstrap; nullopt while one does (for watcher threads).
  template <typename Answer>
  auto askMessengerIfIdle(const Answer& ask) -> std::optional<decltype(ask(*messenger))> {
    std::unique_lock lock(mutex, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;
    return messenger ? ask(*messenger) : decltype(ask(*messenger)){};
  }
  // One message to every peer (connecting where there is no connection yet), waiting up to `waitMs` for the
  // lock (another thread of this rank may hold the bootstrap briefly) and for the words to go out.
  void tellEveryPeer(wire::Kind kind, uint32_t aux, std::span<const uint8_t> payload, int64_t waitMs) {
    const Deadline deadline(waitMs);
    std::unique_lock lock(mutex, std::defer_lock);
    while (!lock.try_lock()) {
      if (deadline.expired()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (messenger == nullptr || worldSize <= 1) return;
    for (int peer = 0; peer < worldSize; ++peer) {
      if (peer == rank) continue;
      try {
        messenger->post(peer, kind, uint64_t(rank), aux, payload, deadline);
      } catch (const Error&) {
        // That rank is gone or unreachable: it does not wait for this one.
      }
    }
    try {
      messenger->progress(deadline, [&] { return messenger->allFlushed(); });
    } catch (const Error&) {
    }
  }
  void sayGoodbye() {
    if (!messenger || saidGoodbye) return;
    saidGoodbye = true;
    try {
      messenger->sayGoodbye(kGoodbyeWaitMs);
    } catch (...) {
    }
  }

  std::string where() const { return "rank " + std::to_string(rank) + " of " + std::to_string(worldSize); }
  std::string within() const { return "within " + std::to_string(timeoutMs) + " ms"; }

  void rendezvousAsRoot();
  void rendezvousAsMember();
  void applyTable(const Message& table, const std::string& step);
  std::vector<Bytes> allGather(std::span<const uint8_t> mine);
  void ringAllGather(std::vector<Bytes>& blocks, uint64_t sequence, const Deadline& deadline, const std::string& step);
  void barrier();
  void barrierAsRoot(uint64_t sequence, const Deadline& deadline, const std::string& step);

  // Waits for a message. On timeout, a step that the root oversees (askRoot) asks the root who is
  // missing and hands its answer, if any, to onTimeout.
  Message waitFor(wire::Kind kind, int peer, uint64_t tag, const Deadline& deadline, bool collective,
                  const std::string& step,
                  const std::function<std::string(const std::optional<std::string>&)>& onTimeout,
                  std::optional<uint64_t> askRoot = std::nullopt);
  std::string status(uint64_t tag) const;  // the root's answer to a status request
  void flush(const std::vector<int>& peers, const Deadline& deadline, const std::string& step);
  // Messenger::post, with the step in front of any error.
  void post(int peer, wire::Kind kind, uint64_t tag, uint32_t aux, std::span<const uint8_t> payload,
            const Deadline& deadline, const std::string& step);
  // Tells `ranks` that the step failed, so that they fail now with this diagnosis instead of later
  // with their own timeout or a closed connection. An abort this rank received is passed on as it
  // came; otherwise the error is sent without its step prefix (receivers put their own in front).
  void abortPeers(const Error& error, const std::string& step, const std::vector<int>& ranks);
  void checkPeer(int peer, const char* operation) const;
  void checkSize(size_t bytes, const char* operation) const;

  // Runs one collective; its failure leaves the ranks out of step, so later collectives refuse.
  template <typename Fn>
  auto collective(Fn&& fn) -> decltype(fn()) {
    if (broken) {
      throw Error(broken->category(),
                  "bootstrap on " + where() + " is unusable after an earlier failure: " + broken->what());
    }
    try {
      return fn();
    } catch (const Error& error) {
      if (error.category() != ErrorCategory::kInvalidArgument) broken = error;
      throw;
    } catch (...) {
      broken = Error(ErrorCategory::kSystem, "a collective was interrupted");
      throw;
    }
  }
};

Bootstrap::Bootstrap(int rank, int worldSize, const UniqueId& id, std::optional<int64_t> timeoutMs,
                     InterruptCheck interruptCheck) {
  if (worldSize < 1 || worldSize > kMaxBootstrapWorldSize) {
    throw Error(ErrorCategory::kInvalidArgument, "bootstrap: world size " + std::to_string(worldSize) +
                                                     " is not in 1.." + std::to_string(kMaxBootstrapWorldSize));
  }
  if (rank < 0 || rank >= worldSize) {
    throw Error(ErrorCategory::kInvalidArgument, "bootstrap: rank " + std::to_string(rank) + " is not in 0.." +
                                                     std::to_string(worldSize - 1) + " (world size " +
                                                     std::to_string(worldSize) + ")");
  }
  impl_ = std::make_unique<Impl>(rank, worldSize, id, checkedTimeout(timeoutMs));
  // Waits call the check about every 100 ms: abort() ends them through it.
  impl_->interruptCheck = [aborted = impl_->aborted, where = impl_->where(), user = std::move(interruptCheck)] {
    if (aborted->load()) throw Error(ErrorCategory::kInvalidArgument, "bootstrap on " + where + ": aborted");
    if (user) user();
  };
  if (rank == 0) {
    impl_->rendezvousAsRoot();
  } else {
    impl_->rendezvousAsMember();
  }
}

Bootstrap::~Bootstrap() = default;
Bootstrap::Bootstrap(Bootstrap&&) noexcept = default;
Bootstrap& Bootstrap::operator=(Bootstrap&&) noexcept = default;

int Bootstrap::rank() const { return impl_->rank; }
int Bootstrap::worldSize() const { return impl_->worldSize; }
int64_t Bootstrap::timeoutMs() const { return impl_->timeoutMs; }
void Bootstrap::abort() { impl_->aborted->store(true); }

std::vector<int> Bootstrap::departedPeers() {
  return impl_->askMessenger([](Messenger& m) { return m.departedPeers(); });
}

std::optional<std::vector<int>> Bootstrap::lostPeersIfIdle() {
  return impl_->askMessengerIfIdle([](Messenger& m) { return m.lostPeers(); });
}

std::vector<int> Bootstrap::lostPeers() {
  return impl_->askMessenger([](Messenger& m) { return m.lostPeers(); });
}

std::optional<std::vector<int>> Bootstrap::departedPeersIfIdle() {
  return impl_->askMessengerIfIdle([](Messenger& m) { return m.departedPeers(); });
}

void Bootstrap::sayGoodbye() {
  std::unique_lock lock(impl_->mutex, std::try_to_lock);
  if (lock.owns_lock()) impl_->sayGoodbye();
}

void Bootstrap::announceFailure(const Error& error, int64_t waitMs) {
  const std::string why = error.what();
  std::span<const uint8_t> payload(reinterpret_cast<const uint8_t*>(why.data()), why.size());
  impl_->tellEveryPeer(wire::Kind::kAbort, uint32_t(error.category()), payload, waitMs);
}

void Bootstrap::announceAbort(int64_t waitMs) { impl_->tellEveryPeer(wire::Kind::kAborted, 0, {}, waitMs); }

std::map<int, std::string> Bootstrap::lostLinks() {
  return impl_->askMessenger([](Messenger& m) { return m.lostLinks(); });
}

std::optional<std::map<int, std::string>> Bootstrap::lostLinksIfIdle() {
  return impl_->askMessengerIfIdle([](Messenger& m) { return m.lostLinks(); });
}

std::vector<int> Bootstrap::abortedPeers() {
  return impl_->askMessenger([](Messenger& m) { return m.abortedPeers(); });
}

std::optional<std::vector<int>> Bootstrap::abortedPeersIfIdle() {
  return impl_->askMessengerIfIdle([](Messenger& m) { return m.abortedPeers(); });
}

std::optional<std::pair<int, std::string>> Bootstrap::announcedFailureIfIdle() {
  std::unique_lock lock(impl_->mutex, std::try_to_lock);
  if (!lock.owns_lock() || !impl_->messenger) return std::nullopt;
  impl_->messenger->lookOnce();
  const std::optional<Abort>& abort = impl_->messenger->abortReceived();
  if (!abort) return std::nullopt;
  return std::make_pair(abort->origin, abort->detail);
}

std::string Bootstrap::peerAddress(int rank) const {
  impl_->checkPeer(rank, "peerAddress");
  std::lock_guard lock(impl_->mutex);
  return impl_->messenger->peerAddress(rank)->toString();
}

void Bootstrap::checkInterrupt() const {
  if (impl_->interruptCheck) impl_->interruptCheck();
}

std::vector<Bootstrap::Bytes> Bootstrap::allGather(std::span<const uint8_t> mine) {
  std::lock_guard lock(impl_->mutex);
  return impl_->collective([&] { return impl_->allGather(mine); });
}

void Bootstrap::barrier() {
  std::lock_guard lock(impl_->mutex);
  impl_->collective([&] { impl_->barrier(); });
}

void Bootstrap::send(int peer, uint64_t tag, std::span<const uint8_t> bytes) {
  std::lock_guard lock(impl_->mutex);
  Impl& impl = *impl_;
  impl.checkPeer(peer, "send");
  impl.checkSize(bytes.size(), "send");
  const std::string step = "send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ", " +
                           std::to_string(bytes.size()) + " bytes) on " + impl.where();
  if (peer == impl.rank) {
    impl.messenger->deliverLocal(wire::Kind::kData, tag, bytes);
    return;
  }
  Deadline deadline(impl.timeoutMs);
  impl.post(peer, wire::Kind::kData, tag, 0, bytes, deadline, step);
  impl.flush({peer}, deadline, step);
}

Bootstrap::Bytes Bootstrap::recv(int peer, uint64_t tag) {
  std::lock_guard lock(impl_->mutex);
  Impl& impl = *impl_;
  impl.checkPeer(peer, "recv");
  const std::string step =
      "recv from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ") on " + impl.where();
  if (peer == impl.rank) {
    if (std::optional<Message> message = impl.messenger->take(wire::Kind::kData, peer, tag)) {
      return std::move(message->payload);
    }
    throw Error(ErrorCategory::kInvalidArgument,
                step + ": this rank sent itself nothing with that tag, so the call would wait forever");
  }
  Deadline deadline(impl.timeoutMs);
  Message message = impl.waitFor(wire::Kind::kData, peer, tag, deadline, false, step, [&](const auto&) {
    std::string text = "rank " + std::to_string(peer) + " sent nothing with this tag " + impl.within();
    std::vector<uint64_t> tags = impl.messenger->waitingTags(wire::Kind::kData, peer);
    if (!tags.empty()) {
      text += " (it did send tag";
      for (size_t i = 0; i < tags.size() && i < 8; ++i) text += (i ? ", " : " ") + std::to_string(tags[i]);
      text += tags.size() > 8 ? ", ...)" : ")";
    }
    return text;
  });
  return std::move(message.payload);
}

void Bootstrap::Impl::rendezvousAsRoot() {
  const std::string step = "bootstrap rendezvous on " + where() + " (the root, at " + rootAddress.toString() + ")";
  Deadline deadline(timeoutMs);
  net::Socket listener;
  try {
    listener = rootListener(rootAddress);
  } catch (const Error& error) {
    throw Error(error.category(), step + ": " + error.what() +
                                      " (is another job using this port? give another address or a new UniqueId)");
  }
  messenger = std::make_unique<Messenger>(rank, worldSize, id.secret(), std::move(listener), rootAddress,
                                          std::min(timeoutMs, kHelloTimeoutMs));
  messenger->setInterruptCheck(interruptCheck);
  messenger->setStatusProvider([this](uint64_t tag) { return status(tag); });
  inRendezvous = true;

  // Ranks only ever become connected, so a cursor over them finds the first missing one cheaply.
  int cursor = 1;
  auto allJoined = [&] {
    while (cursor < worldSize && messenger->connectedFrom(cursor)) ++cursor;
    return cursor == worldSize;
  };
  std::vector<int> others;
  for (int r = 1; r < worldSize; ++r) others.push_back(r);
  if (!messenger->progress(deadline, allJoined)) {
    std::vector<int> joined;
    std::vector<int> missing;
    for (int r : others) (messenger->connectedFrom(r) ? joined : missing).push_back(r);
    Error error(ErrorCategory::kTimeout, step + ": " + rankList(missing) + " did not arrive " + within() + " (" +
                                             std::to_string(joined.size() + 1) + " of " + std::to_string(worldSize) +
                                             " ranks joined)");
    for (int r : joined) messenger->setPeerAddress(r, *messenger->announcedAddress(r));
    abortPeers(error, step, joined);
    throw error;
  }
  inRendezvous = false;
  std::vector<uint8_t> table;
  table.reserve(static_cast<size_t>(worldSize) * net::SocketAddress::kPackedBytes);
  for (int r = 0; r < worldSize; ++r) {
    net::SocketAddress address = r == 0 ? rootAddress : *messenger->announcedAddress(r);
    messenger->setPeerAddress(r, address);
    net::SocketAddress::Packed packed = address.pack();
    table.insert(table.end(), packed.begin(), packed.end());
  }
  try {
    for (int r : others) post(r, wire::Kind::kTable, 0, 0, table, deadline, step + ": sending the rank table");
    flush(others, deadline, step + ": sending the rank table");
  } catch (const Error& error) {
    abortPeers(error, step, others);
    throw;
  }
}

void Bootstrap::Impl::rendezvousAsMember() {
  const std::string step = "bootstrap rendezvous on " + where();
  Deadline deadline(timeoutMs);
  const std::string root = "the root (rank 0)";
  net::Socket toRoot;
  try {
    toRoot = net::Socket::connect(rootAddress, deadline, true, root, interruptCheck);
  } catch (const Error& error) {
    throw Error(error.category(), step + ": " + error.what());
  }
  // Listen on the interface a setting chose (LOOM_SOCKET_IFNAME, NCCL_SOCKET_IFNAME), else on the one that
  // reaches the root: the one other hosts most likely reach us on. Port channels listen where this does.
  const ChosenInterface& chosen = chosenInterface();
  net::Socket listener = net::Socket::listen(chosen.fromSetting ? chosen.address : toRoot.localAddress().withPort(0));
  net::SocketAddress listenAddress = listener.localAddress();
  messenger = std::make_unique<Messenger>(rank, worldSize, id.secret(), std::move(listener), listenAddress,
                                          std::min(timeoutMs, kHelloTimeoutMs));
  messenger->setInterruptCheck(interruptCheck);
  messenger->setPeerAddress(0, rootAddress);
  messenger->attachOutgoing(0, std::move(toRoot));
  Message table = waitFor(
      wire::Kind::kTable, 0, 0, deadline, true, step,
      [&](const std::optional<std::string>& rootSays) {
        std::string text = root + " at " + rootAddress.toString() + " did not send the rank table " + within();
        if (rootSays) return text + "; the root says " + *rootSays;
        return text + "; it does once all " + std::to_string(worldSize) +
               " ranks have connected, so a rank that has not started holds it up";
      },
      kRendezvousStatus);
  applyTable(table, step);
}

void Bootstrap::Impl::applyTable(const Message& table, const std::string& step) {
  const size_t entry = net::SocketAddress::kPackedBytes;
  if (table.payload.size() != static_cast<size_t>(worldSize) * entry) {
    throw Error(ErrorCategory::kTransport, step + ": the rank table has " + std::to_string(table.payload.size()) +
                                               " bytes, expected " + std::to_string(worldSize * entry));
  }
  for (int r = 0; r < worldSize; ++r) {
    std::optional<net::SocketAddress> address = net::SocketAddress::unpack(&table.payload[r * entry]);
    if (!address)
      throw Error(ErrorCategory::kTransport,
                  step + ": the rank table entry of rank " + std::to_string(r) + " is malformed");
    if (r == rank && !(*address == messenger->listenAddress())) {
      throw Error(ErrorCategory::kTransport, step + ": the rank table lists " + address->toString() +
                                                 " for this rank, which listens on " +
                                                 messenger->listenAddress().toString());
    }
    messenger->setPeerAddress(r, *address);
  }
}

std::vector<Bootstrap::Bytes> Bootstrap::Impl::allGather(std::span<const uint8_t> mine) {
  checkSize(mine.size(), "allGather");
  const uint64_t sequence = ++allGatherCount;
  const std::string step = "allGather #" + std::to_string(sequence) + " on " + where();
  Deadline deadline(timeoutMs);
  std::vector<Bytes> blocks(static_cast<size_t>(worldSize));
  blocks[rank].assign(mine.begin(), mine.end());
  if (worldSize == 1) return blocks;
  // A ring: in step s each rank forwards the block it got in step s - 1 (its own first), so every
  // rank sends and receives worldSize - 1 blocks and no rank carries more than its share.
  const int next = (rank + 1) % worldSize;
  try {
    ringAllGather(blocks, sequence, deadline, step);
  } catch (const Error& error) {
    // The successor waits on this rank and would only see it go away: hand it the diagnosis. Passed
    // on from rank to rank, it reaches every rank that is still in the ring.
    abortPeers(error, step, {next});
    throw;
  }
  return blocks;
}

void Bootstrap::Impl::ringAllGather(std::vector<Bytes>& blocks, uint64_t sequence, const Deadline& deadline,
                                    const std::string& step) {
  const int next = (rank + 1) % worldSize;
  const int previous = (rank + worldSize - 1) % worldSize;
  for (int s = 0; s < worldSize - 1; ++s) {
    const int sendOrigin = (rank - s + worldSize) % worldSize;
    const int receiveOrigin = (rank - s - 1 + 2 * worldSize) % worldSize;
    post(next, wire::Kind::kAllGather, sequence, static_cast<uint32_t>(sendOrigin), blocks[sendOrigin], deadline, step);
    // Blocks of the ranks just before this one arrive first, so the first block that fails to
    // arrive is that of the nearest rank before this one that has not called allGather.
    Message message = waitFor(wire::Kind::kAllGather, previous, sequence, deadline, true, step, [&](const auto&) {
      std::string text = "the block of rank " + std::to_string(receiveOrigin);
      if (receiveOrigin != previous) text += " (forwarded by rank " + std::to_string(previous) + ")";
      text +=
          " did not arrive " + within() + ": rank " + std::to_string(receiveOrigin) + " has not reached this allGather";
      if (receiveOrigin != previous) text += ", or a rank between it and this one is stuck";
      return text;
    });
    if (message.aux != static_cast<uint32_t>(receiveOrigin)) {
      throw Error(ErrorCategory::kTransport, step + ": rank " + std::to_string(previous) + " sent the block of rank " +
                                                 std::to_string(message.aux) + " where that of rank " +
                                                 std::to_string(receiveOrigin) + " was due (ranks out of step?)");
    }
    blocks[receiveOrigin] = std::move(message.payload);
  }
  flush({next}, deadline, step);
}

void Bootstrap::Impl::barrier() {
  const uint64_t sequence = ++barrierCount;
  const std::string step = "barrier #" + std::to_string(sequence) + " on " + where();
  Deadline deadline(timeoutMs);
  if (worldSize == 1) return;
  // Through the root rather than a dissemination pattern: it costs a round trip more, but the root
  // sees every rank, so a timeout names exactly the ranks that did not arrive.
  if (rank == 0) {
    barrierAsRoot(sequence, deadline, step);
    return;
  }
  post(0, wire::Kind::kBarrier, sequence, 0, {}, deadline, step);
  waitFor(
      wire::Kind::kBarrier, 0, sequence, deadline, true, step,
      [&](const std::optional<std::string>& rootSays) {
        std::string text = "the root (rank 0) did not release it " + within();
        if (rootSays) return text + "; the root says " + *rootSays;
        return text + "; it does once every rank has arrived, so a rank that has not reached the barrier holds it up";
      },
      sequence);
}

void Bootstrap::Impl::barrierAsRoot(uint64_t sequence, const Deadline& deadline, const std::string& step) {
  barrierInProgress = sequence;
  struct Done {
    uint64_t& flag;
    ~Done() { flag = 0; }
  } done{barrierInProgress};
  int cursor = 1;
  auto settled = [&] {
    while (cursor < worldSize && messenger->has(wire::Kind::kBarrier, cursor, sequence)) ++cursor;
    return cursor == worldSize || messenger->peerFailure(cursor).has_value();
  };
  messenger->progress(deadline, settled);
  std::vector<int> arrived;
  std::vector<int> missing;
  std::string failures;
  for (int r = 1; r < worldSize; ++r) {
    if (messenger->has(wire::Kind::kBarrier, r, sequence)) {
      arrived.push_back(r);
      continue;
    }
    missing.push_back(r);
    if (std::optional<std::string> failure = messenger->peerFailure(r)) failures += "; " + *failure;
  }
  if (!missing.empty()) {
    Error error =
        failures.empty()
            ? Error(ErrorCategory::kTimeout, step + ": " + rankList(missing) + " did not arrive " + within())
            : Error(ErrorCategory::kTransport, step + ": " + rankList(missing) + " did not arrive" + failures);
    abortPeers(error, step, arrived);
    throw error;
  }
  std::vector<int> others;
  for (int r = 1; r < worldSize; ++r) {
    messenger->take(wire::Kind::kBarrier, r, sequence);
    others.push_back(r);
  }
  try {
    for (int r : others) post(r, wire::Kind::kBarrier, sequence, 0, {}, deadline, step);
  } catch (const Error& error) {
    abortPeers(error, step, others);
    throw;
  }
  flush(others, deadline, step);
}

Message Bootstrap::Impl::waitFor(wire::Kind kind, int peer, uint64_t tag, const Deadline& deadline, bool collective,
                                 const std::string& step,
                                 const std::function<std::string(const std::optional<std::string>&)>& onTimeout,
                                 std::optional<uint64_t> askRoot) {
  auto aborted = [&] { return collective && messenger->abortReceived().has_value(); };
  auto settled = [&] {
    return messenger->has(kind, peer, tag) || aborted() || messenger->peerFailure(peer).has_value();
  };
  bool done = messenger->progress(deadline, settled);
  if (!done && askRoot && messenger->requestStatus(0, *askRoot)) {
    // The root knows who is missing; the message may also still come while it answers.
    messenger->progress(Deadline(kStatusGraceMs), [&] { return settled() || messenger->hasStatus(*askRoot); });
  }
  if (std::optional<Message> message = messenger->take(kind, peer, tag)) return std::move(*message);
  if (aborted()) {
    const Abort& abort = *messenger->abortReceived();
    throw Error(abort.category, step + ": " + abort.text());
  }
  if (std::optional<std::string> failure = messenger->peerFailure(peer)) {
    throw Error(ErrorCategory::kTransport, step + ": " + *failure);
  }
  std::optional<std::string> rootSays = askRoot ? messenger->takeStatus(*askRoot) : std::nullopt;
  throw Error(ErrorCategory::kTimeout, step + ": " + onTimeout(rootSays));
}

std::string Bootstrap::Impl::status(uint64_t tag) const {
  std::vector<int> missing;
  if (tag == kRendezvousStatus) {
    if (!inRendezvous) return "the rendezvous is over";
    for (int r = 1; r < worldSize; ++r) {
      if (!messenger->connectedFrom(r)) missing.push_back(r);
    }
    return rankList(missing) + hasOrHave(missing) + " not arrived (" + std::to_string(worldSize - missing.size()) +
           " of " + std::to_string(worldSize) + " ranks joined)";
  }
  if (tag != barrierInProgress) {
    return tag > barrierCount ? "it has not reached barrier #" + std::to_string(tag) + " itself"
                              : "it has released barrier #" + std::to_string(tag);
  }
  for (int r = 1; r < worldSize; ++r) {
    if (!messenger->has(wire::Kind::kBarrier, r, tag)) missing.push_back(r);
  }
  return rankList(missing) + hasOrHave(missing) + " not arrived";
}

void Bootstrap::Impl::post(int peer, wire::Kind kind, uint64_t tag, uint32_t aux, std::span<const uint8_t> payload,
                           const Deadline& deadline, const std::string& step) {
  try {
    messenger->post(peer, kind, tag, aux, payload, deadline);
  } catch (const Error& error) {
    throw Error(error.category(), step + ": " + error.what());
  }
}

void Bootstrap::Impl::flush(const std::vector<int>& peers, const Deadline& deadline, const std::string& step) {
  auto settled = [&](int peer) { return messenger->flushed(peer) || messenger->sendFailure(peer).has_value(); };
  messenger->progress(deadline, [&] { return std::all_of(peers.begin(), peers.end(), settled); });
  std::vector<int> slow;
  for (int peer : peers) {
    if (messenger->flushed(peer)) continue;
    if (std::optional<std::string> failure = messenger->sendFailure(peer)) {
      throw Error(ErrorCategory::kTransport, step + ": " + *failure);
    }
    slow.push_back(peer);
  }
  if (!slow.empty()) {
    throw Error(ErrorCategory::kTimeout, step + ": " + rankList(slow) + " did not take the data " + within() +
                                             " (not inside a bootstrap call?)");
  }
}

void Bootstrap::Impl::abortPeers(const Error& error, const std::string& step, const std::vector<int>& ranks) {
  Deadline deadline(std::min(timeoutMs, kAbortTimeoutMs));
  Abort abort{error.category(), error.what(), rank};
  if (messenger->abortReceived()) {
    abort = *messenger->abortReceived();
  } else if (abort.detail.starts_with(step + ": ")) {
    abort.detail.erase(0, step.size() + 2);
  }
  std::span<const uint8_t> payload(reinterpret_cast<const uint8_t*>(abort.detail.data()), abort.detail.size());
  for (int r : ranks) {
    try {
      messenger->post(r, wire::Kind::kAbort, static_cast<uint64_t>(abort.origin), static_cast<uint32_t>(abort.category),
                      payload, deadline);
    } catch (const Error&) {
      // That rank is gone or unreachable; it fails on its own timeout.
    }
  }
  try {
    messenger->progress(deadline, [&] { return messenger->allFlushed(); });
  } catch (const Error&) {
  }
}

void Bootstrap::Impl::checkPeer(int peer, const char* operation) const {
  if (peer < 0 || peer >= worldSize) {
    throw Error(ErrorCategory::kInvalidArgument, std::string(operation) + " on " + where() + ": peer " +
                                                     std::to_string(peer) + " is not in 0.." +
                                                     std::to_string(worldSize - 1));
  }
}

void Bootstrap::Impl::checkSize(size_t bytes, const char* operation) const {
  if (bytes > kMaxBootstrapMessageBytes) {
    throw Error(ErrorCategory::kInvalidArgument, std::string(operation) + " on " + where() + ": " +
                                                     std::to_string(bytes) + " bytes is over the limit of " +
                                                     std::to_string(kMaxBootstrapMessageBytes) + " bytes");
  }
}

}  // namespace loom
