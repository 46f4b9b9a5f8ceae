#pragma once

// Where this rank's device-side waits report a timeout. A kernel whose wait runs out writes one
// record here (mapped host memory) and traps; the host, seeing the kernel fail, calls check() to
// turn the record into a Timeout error that says who waited for what. A wait that ends because its
// peer is gone or the communicator was aborted writes a record too, but its kernel returns, and the
// host finds the record at the next call or when asked for asynchronous errors:
//
//   rank 1, thread block 3, op 7: semaphore wait on channel 2 (peer 0) timed out after 1000 ms:
//   expected count 5, saw 4
//
// The timeout is LOOM_DEVICE_TIMEOUT_MS (default 30000; 0 waits forever).

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "loom/device/diagnostics.hpp"
#include "loom/proxy_activity.hpp"

namespace loom {

int64_t deviceTimeoutMs();  // LOOM_DEVICE_TIMEOUT_MS, checked
constexpr int64_t kDefaultDeviceTimeoutMs = 30000;

class DeviceDiagnostics {
 public:
  // `onDevice`: kernels report (mapped pinned memory); otherwise host threads do (host memory).
  explicit DeviceDiagnostics(int rank, std::optional<int64_t> timeoutMs = std::nullopt, bool onDevice = true);
  ~DeviceDiagnostics();
  DeviceDiagnostics(const DeviceDiagnostics&) = delete;
  DeviceDiagnostics& operator=(const DeviceDiagnostics&) = delete;

  // What a device handle carries: the record's device address, the rank, the timeout.
  device::WaitContext waitContext(int channel = -1, int peer = -1) const;
  int64_t timeoutMs() const { return timeoutMs_; }

  // The message of a recorded timeout, if one was recorded.
  std::optional<std::string> report() const;
  // The record itself once complete (who waited: rank, block, op), for callers that know the program.
  std::optional<device::DiagnosticRecord> recorded() const;
  // Throws a Timeout Error with report() when there is one.
  void check() const;
  // Whether the record's wait ended on a departed peer or an abort: a GPU kernel then returned
  // cleanly rather than trapped (device::endsCleanly).
  bool endedCleanly() const;
  void clear();
  // Makes every wait that reports here give up: host-thread waits throw, GPU waits record kAborted and
  // their kernels return.
  void requestAbort();
  // Makes every wait on `rank` (and every wait that names no peer) end with a kPeerGone record. `cause`
  // says how the host knows (the report names it): by default that its process is gone; for a link
  // that failed, the connection's error. The first cause noted for a rank stays.
  void notePeerGone(int rank, const std::string& cause = {});
  // notePeerGone for a peer whose bootstrap said goodbye: it left on purpose (it aborted or destroyed its
  // communicator, or its process ended normally), and the report says so rather than that it died.
  void notePeerLeft(int rank);
  // notePeerGone for a peer that announced it aborted its communicator (Bootstrap::announceAbort).
  void notePeerAborted(int rank);
  // A peer announced that its call failed (Bootstrap::announceFailure): every wait ends (as requestAbort),
  // and an aborted wait's report names the peer and why. The first announcement stays.
  void notePeerFailed(int rank, const std::string& why);
  // The announced failure noted, or nullopt ("rank R's call failed: why").
  std::optional<std::string> peerFailure() const;
  // Whether this rank's own wait or entry check stopped the call (a timeout, a bad entry), as opposed to a
  // wait that ended because a peer left, failed, or the communicator was aborted.
  bool faultedHere() const;
  // The peers noted gone because a link to them failed, with why ("rank 1 is unreachable (...)"; several
  // joined by "; "), for an asynchronous error while no wait has ended on them yet.
  std::optional<std::string> failedLinks() const;
  // A proxy whose port channels this communicator's programs use: a report of a port-channel wait that
  // ran out (FIFO full, flush) says what the proxy was doing. Held weakly (a proxy may go first); adding
  // one twice keeps one.
  void watchProxy(const std::shared_ptr<const ProxyActivity>& activity);

 private:
  struct Storage;
  std::unique_ptr<Storage> storage_;
  int rank_;
  int64_t timeoutMs_;
  mutable std::mutex causesMutex_;
  std::map<int, std::string> causes_;  // rank -> why it was noted gone, where it was not its process
  std::set<int> left_;                 // ranks noted gone that said goodbye first (guarded by causesMutex_)
  std::set<int> aborted_;              // ranks noted gone that announced an abort (same guard)
  std::string peerFailure_;            // "rank R's call failed: why", from notePeerFailed (same guard)
  std::vector<std::weak_ptr<const ProxyActivity>> proxies_;  // guarded by causesMutex_
};

// The text of a record. `peerGoneCause`: how the host learnt that a kPeerGone record's peer is gone,
// where it was not the close of its bootstrap connection.
// What the host knows of the peers a record's wait ended on: `peerGoneCause`, how it learnt that a
// kPeerGone record's peer is gone where it was not the close of its bootstrap connection; `peerLeft`, that
// peer said goodbye before it went; `peerAborted`, it announced an abort of its communicator; `peerFailure`,
// a peer announced its call failed (ends kAborted waits).
struct PeerNews {
  std::string peerGoneCause;
  bool peerLeft = false;
  bool peerAborted = false;
  std::string peerFailure;
};
std::string describe(const device::DiagnosticRecord& record, int64_t timeoutMs, const PeerNews& news = {});

}  // namespace loom
