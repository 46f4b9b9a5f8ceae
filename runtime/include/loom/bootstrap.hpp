#pragma once

// The bootstrap: how the ranks of a job find each other and exchange the small amounts of
// metadata (addresses, memory handles) that setting up channels needs, over TCP, before any GPU
// transport exists.
//
// Rank 0 is the root: it listens at the UniqueId's address, every other rank connects to it and
// presents the id's secret, and the root sends every rank the table of listening addresses. After
// that ranks talk directly. Every step has a timeout; a step that times out names the ranks that
// did not arrive or did not answer.

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "loom/error.hpp"
#include "loom/unique_id.hpp"

namespace loom {

// The timeout of every bootstrap step when none is given: LOOM_BOOTSTRAP_TIMEOUT_MS, else 30 s.
int64_t defaultBootstrapTimeoutMs();
constexpr int64_t kDefaultBootstrapTimeoutMs = 30000;
constexpr int kMaxBootstrapWorldSize = 1 << 16;
constexpr uint64_t kMaxBootstrapMessageBytes = uint64_t{1} << 30;

class Bootstrap {
 public:
  using Bytes = std::vector<uint8_t>;
  // Called about every 100 ms while a call waits; it may throw to abandon the wait (the Python
  // binding raises KeyboardInterrupt there when the user presses Ctrl-C). A collective abandoned
  // this way leaves the object unusable for further collectives.
  using InterruptCheck = std::function<void()>;

  // Joins the job: returns once every rank has joined (or throws: InvalidArgument for a bad rank,
  // world size or timeout; Timeout naming the missing ranks; Transport when refused).
  Bootstrap(int rank, int worldSize, const UniqueId& id, std::optional<int64_t> timeoutMs = std::nullopt,
            InterruptCheck interruptCheck = {});
  // Rank, world size, root address and secret from the launcher's environment (torchrun,
  // loom.launch, Open MPI, Slurm); see launch_environment.hpp and docs/runtime.md.
  static Bootstrap fromEnvironment(std::optional<int64_t> timeoutMs = std::nullopt, InterruptCheck interruptCheck = {});

  ~Bootstrap();
  Bootstrap(Bootstrap&&) noexcept;
  Bootstrap& operator=(Bootstrap&&) noexcept;

  int rank() const;
  int worldSize() const;
  int64_t timeoutMs() const;
  std::string peerAddress(int rank) const;  // where that rank accepts bootstrap connections

  // Collectives: every rank calls them in the same order. The result of allGather holds each
  // rank's bytes at its index; sizes may differ between ranks. After a collective fails the
  // object is unusable (the ranks no longer agree on where they are) and further calls throw.
  std::vector<Bytes> allGather(std::span<const uint8_t> mine);
  void barrier();

  // Point to point: messages between one pair with one tag arrive in order; a recv takes the
  // oldest message from `peer` with `tag`, whatever other messages arrived first. send returns
  // once the bytes are with the operating system.
  void send(int peer, uint64_t tag, std::span<const uint8_t> bytes);
  Bytes recv(int peer, uint64_t tag);

  // The ranks whose bootstrap connection to this rank was closed from their side (their process
  // exited or was killed), after one look at the sockets; for diagnosing a peer that stopped
  // answering. Only ranks this rank has talked to can be seen.
  std::vector<int> departedPeers();
  // Of departedPeers(), those that did not say goodbye first (a bootstrap says it as it closes: its rank
  // left on purpose), so a process that was killed or crashed; when no other call holds the bootstrap, and
  // nullopt when one does (a watchdog's question must not wait for a call in flight, which may itself be
  // waiting for the lost peer).
  std::optional<std::vector<int>> lostPeersIfIdle();
  // lostPeersIfIdle(), waiting for a call in flight (for a failed call's diagnosis).
  std::vector<int> lostPeers();
  // departedPeers() when no other call holds the bootstrap, else nullopt (for a watcher thread beside the
  // calls: one that waits on a peer sees its departure itself).
  std::optional<std::vector<int>> departedPeersIfIdle();
  // Tells the peers now that this rank leaves on purpose, as the destructor does (once for both), when no
  // other call holds the bootstrap: for a process about to exit with its bootstrap still open.
  void sayGoodbye();
  // Tells every peer that a call of this rank failed, and why (`error`), as a failed collective step of the
  // bootstrap does: a peer's waits on the call end at once, naming this rank and why (the departure watch
  // looks for it), and its next collective step of this bootstrap fails with it. Best effort, within
  // `waitMs`; a peer that is gone is passed over.
  void announceFailure(const Error& error, int64_t waitMs);
  // Tells every peer that this rank aborted its communicator (after abort(): this bootstrap takes part in
  // nothing more), waiting up to `waitMs`; their waits on it end, saying it aborted. Best effort.
  void announceAbort(int64_t waitMs);
  // The peers whose link was lost, each with what the socket said (the link's addresses and interface);
  // they count among lostPeers. Empty while a call holds the bootstrap (IfIdle: nullopt then).
  std::map<int, std::string> lostLinks();
  std::optional<std::map<int, std::string>> lostLinksIfIdle();
  // The peers that announced an abort (they count among departedPeers, not among lostPeers).
  std::vector<int> abortedPeers();
  std::optional<std::vector<int>> abortedPeersIfIdle();  // nullopt while a call holds the bootstrap
  // The first failure a peer announced (its rank, and why), when no other call holds the bootstrap;
  // nullopt when none was announced or a call holds it.
  std::optional<std::pair<int, std::string>> announcedFailureIfIdle();

  // What the bootstrap's own waits run about every 100 ms, for waits outside it that abort() and the
  // interrupt check should end as well (HostBoard): throws once abort() was called, then runs the check.
  void checkInterrupt() const;

  // Ends the waits of calls in flight on other threads (within about 100 ms) and of every later
  // call: they throw. Safe from any thread while a call runs; the object stays to be destroyed.
  void abort();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
