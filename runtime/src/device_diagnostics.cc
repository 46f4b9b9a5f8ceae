#include "loom/device_diagnostics.hpp"

#include "environment.hpp"
#include "gpu.hpp"
#include "loom/error.hpp"

namespace loom {

int64_t deviceTimeoutMs() {
  std::optional<std::string> text = processEnvironment("LOOM_DEVICE_TIMEOUT_MS");
  if (!text) return kDefaultDeviceTimeoutMs;
  return parseInteger(*text, 0, int64_t(24) * 3600 * 1000, "LOOM_DEVICE_TIMEOUT_MS");
}

// The record lives in mapped pinned memory when there is a GPU (kernels write it), else in plain
// host memory (host threads of the CPU backend write it).
struct DeviceDiagnostics::Storage {
  gpu::PinnedHostBuffer buffer;
  device::DiagnosticRecord* host() const { return static_cast<device::DiagnosticRecord*>(buffer.data()); }
  device::DiagnosticRecord* deviceView() const {
    return static_cast<device::DiagnosticRecord*>(buffer.deviceData() ? buffer.deviceData() : buffer.data());
  }
};

DeviceDiagnostics::DeviceDiagnostics(int rank, std::optional<int64_t> timeoutMs, bool onDevice)
    : storage_(std::make_unique<Storage>()), rank_(rank), timeoutMs_(timeoutMs ? *timeoutMs : deviceTimeoutMs()) {
  if (timeoutMs_ < 0) throw Error(ErrorCategory::kInvalidArgument, "device timeout: must be 0 (none) or positive");
  const bool mapped = onDevice && gpu::deviceCount() > 0;
  storage_->buffer = gpu::PinnedHostBuffer(sizeof(device::DiagnosticRecord), mapped);
}

DeviceDiagnostics::~DeviceDiagnostics() = default;

device::WaitContext DeviceDiagnostics::waitContext(int channel, int peer) const {
  device::WaitContext context;
  context.record = storage_->deviceView();
  context.timeoutNs = timeoutMs_ * 1000000;
  context.rank = rank_;
  context.channel = channel;
  context.peer = peer;
  return context;
}

namespace {

// A packet read's last look: both halves' flags (flag1 << 32 | flag2); 0 is scratch never written.
std::string packetFlags(uint64_t seen) {
  const uint32_t first = uint32_t(seen >> 32), second = uint32_t(seen);
  if (first == second) return first == 0 ? "flag 0 (nothing written yet)" : "flag " + std::to_string(first);
  return "flags " + std::to_string(first) + " and " + std::to_string(second) + " in its halves";
}

// A counted call's entry that could not run: no timeout, the call stopped at once.
std::string describeEntryFault(const device::DiagnosticRecord& r, std::string text) {
  if (device::WaitKind(r.kind) == device::WaitKind::kEntryMismatch) {
    text += "a send of " + std::to_string(r.seen) + " bytes meets a receive entry of " + std::to_string(r.expected) +
            " bytes";
    text += r.peer >= 0 ? " posted by rank " + std::to_string(r.peer) : std::string(" of this rank (a send to itself)");
    if (r.channel >= 0) text += " (channel " + std::to_string(r.channel) + ")";
    return text + "; a send and its receive must have the same size";
  }
  if (device::WaitKind(r.kind) == device::WaitKind::kEntrySentMismatch) {
    text += "a receive entry of " + std::to_string(r.expected) + " bytes meets a send of " + std::to_string(r.seen) +
            " bytes from rank " + std::to_string(r.peer);
    if (r.channel >= 0) text += " (channel " + std::to_string(r.channel) + ")";
    return text + "; a send and its receive must have the same size";
  }
  return text + "an entry ends at byte " + std::to_string(r.seen) + ", past the end of its " +
         std::to_string(r.expected) + "-byte buffer";
}

}  // namespace

// What a wait of `kind` waited for and what it last read, in that wait's own terms.
std::string waitValues(device::WaitKind kind, uint64_t expected, uint64_t seen) {
  using device::WaitKind;
  switch (kind) {
    case WaitKind::kPacket:
      return "expected flag " + std::to_string(expected) + ", the packet carried " + packetFlags(seen);
    case WaitKind::kFifoFull:
      return "the proxy did not free a slot (needed tail " + std::to_string(expected) + ", saw " +
             std::to_string(seen) + ")";
    case WaitKind::kFifoSync:
      return "the proxy did not finish the trigger (needed tail " + std::to_string(expected) + ", saw " +
             std::to_string(seen) + ")";
    default:
      return "expected count " + std::to_string(expected) + ", saw " + std::to_string(seen);
  }
}

std::string waitName(device::WaitKind kind) {
  using device::WaitKind;
  switch (kind) {
    case WaitKind::kSemaphore:
      return "semaphore wait";
    case WaitKind::kPacket:
      return "packet read";
    case WaitKind::kFifoFull:
      return "port channel push (FIFO full)";
    case WaitKind::kFifoSync:
      return "port channel flush";
    default:
      return "wait";
  }
}

std::string describe(const device::DiagnosticRecord& r, int64_t timeoutMs, const PeerNews& news) {
  const std::string& peerGoneCause = news.peerGoneCause;
  const bool peerLeft = news.peerLeft;
  using device::WaitKind;
  std::string text = "rank " + std::to_string(r.rank);
  if (r.block >= 0) text += ", thread block " + std::to_string(r.block);
  if (r.op >= 0) text += ", op " + std::to_string(r.op);
  text += ": ";
  // A wait that ended early reads as the wait it was (a packet read's flags are no count).
  const bool endedEarly = device::endsCleanly(r.kind);
  const WaitKind waited = endedEarly && r.waited > 0 ? WaitKind(r.waited) : WaitKind(r.kind);
  const std::string expected = waitValues(waited, r.expected, r.seen);
  switch (WaitKind(r.kind)) {
    case WaitKind::kSemaphore:
    case WaitKind::kPacket:
    case WaitKind::kFifoFull:
    case WaitKind::kFifoSync:
      text += waitName(WaitKind(r.kind));
      break;
    case WaitKind::kEntryMismatch:
    case WaitKind::kEntrySentMismatch:
    case WaitKind::kEntryOutside:
      return describeEntryFault(r, text);
    case WaitKind::kPeerGone:
      text += waitName(waited);
      if (r.channel >= 0) text += " on channel " + std::to_string(r.channel);
      text += " ended: rank " + std::to_string(r.peer);
      if (news.peerAborted) {
        text += " aborted its communicator (it announced the abort; its calls take part in nothing more)";
      } else if (peerLeft) {
        text += " left on purpose (its bootstrap said goodbye: it aborted or destroyed its communicator, or its "
                "process ended)";
      } else {
        text += peerGoneCause.empty()
                    ? "'s process is gone (its bootstrap connection closed without a goodbye: exited or killed)"
                    : " is unreachable (" + peerGoneCause + ")";
      }
      return text + "; " + expected;
    case WaitKind::kAborted:
      text += waitName(waited);
      if (r.channel >= 0) text += " on channel " + std::to_string(r.channel);
      if (r.peer >= 0) text += " (peer " + std::to_string(r.peer) + ")";
      if (!news.peerFailure.empty()) return text + " ended: " + news.peerFailure + "; " + expected;
      return text + " ended: the communicator was aborted, or another wait of it stopped on a departed peer; " +
             expected;
    default:
      text += "wait";
  }
  if (r.channel >= 0) text += " on channel " + std::to_string(r.channel);
  if (r.peer >= 0)
    text += (r.channel >= 0 ? " (peer " : " on the channel to rank ") + std::to_string(r.peer) +
            (r.channel >= 0 ? ")" : "");
  text += " timed out after " + std::to_string(timeoutMs) + " ms: " + expected;
  return text;
}

std::optional<std::string> DeviceDiagnostics::report() const {
  const device::DiagnosticRecord* record = storage_->host();
  if (device::loadAcquire(const_cast<int32_t*>(&record->state)) < 2) return std::nullopt;
  const auto kind = device::WaitKind(record->kind);
  PeerNews news;
  std::string proxies;
  {
    std::lock_guard lock(causesMutex_);
    if (kind == device::WaitKind::kPeerGone) {
      if (auto found = causes_.find(record->peer); found != causes_.end()) news.peerGoneCause = found->second;
      news.peerLeft = left_.contains(record->peer);
      news.peerAborted = aborted_.contains(record->peer);
    }
    if (kind == device::WaitKind::kAborted) news.peerFailure = peerFailure_;
    if (kind == device::WaitKind::kFifoSync || kind == device::WaitKind::kFifoFull) {
      for (const std::weak_ptr<const ProxyActivity>& watched : proxies_) {
        if (std::shared_ptr<const ProxyActivity> activity = watched.lock()) proxies += "; " + activity->describe();
      }
    }
  }
  return describe(*record, timeoutMs_, news) + proxies;
}

void DeviceDiagnostics::watchProxy(const std::shared_ptr<const ProxyActivity>& activity) {
  std::lock_guard lock(causesMutex_);
  std::erase_if(proxies_, [](const std::weak_ptr<const ProxyActivity>& watched) { return watched.expired(); });
  for (const std::weak_ptr<const ProxyActivity>& watched : proxies_) {
    if (watched.lock() == activity) return;
  }
  proxies_.push_back(activity);
}

void DeviceDiagnostics::check() const {
  const device::DiagnosticRecord* record = storage_->host();
  if (auto text = report()) {
    const ErrorCategory category = device::entryFault(record->kind)    ? ErrorCategory::kInvalidArgument
                                   : device::endsCleanly(record->kind) ? ErrorCategory::kTransport
                                                                       : ErrorCategory::kTimeout;
    throw Error(category, *text);
  }
}

std::optional<device::DiagnosticRecord> DeviceDiagnostics::recorded() const {
  const device::DiagnosticRecord* record = storage_->host();
  if (device::loadAcquire(const_cast<int32_t*>(&record->state)) < 2) return std::nullopt;
  return *record;
}

bool DeviceDiagnostics::endedCleanly() const {
  const device::DiagnosticRecord* record = storage_->host();
  return device::loadAcquire(const_cast<int32_t*>(&record->state)) == 2 && device::endsCleanly(record->kind);
}

void DeviceDiagnostics::clear() { *storage_->host() = device::DiagnosticRecord{}; }

void DeviceDiagnostics::requestAbort() { device::storeRelease(&storage_->host()->abortRequested, int32_t(1)); }

std::optional<std::string> DeviceDiagnostics::failedLinks() const {
  std::lock_guard lock(causesMutex_);
  std::string text;
  for (const auto& [rank, cause] : causes_) {
    if (cause.empty()) continue;
    text +=
        (text.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + " is unreachable (" + cause + ")";
  }
  if (text.empty()) return std::nullopt;
  return text;
}

void DeviceDiagnostics::notePeerFailed(int rank, const std::string& why) {
  {
    std::lock_guard lock(causesMutex_);
    if (!peerFailure_.empty()) return;
    peerFailure_ = "rank " + std::to_string(rank) + "'s call failed: " + why;
  }
  requestAbort();
}

std::optional<std::string> DeviceDiagnostics::peerFailure() const {
  std::lock_guard lock(causesMutex_);
  if (peerFailure_.empty()) return std::nullopt;
  return peerFailure_;
}

bool DeviceDiagnostics::faultedHere() const {
  const device::DiagnosticRecord* record = storage_->host();
  return device::loadAcquire(const_cast<int32_t*>(&record->state)) >= 2 && !device::endsCleanly(record->kind);
}

void DeviceDiagnostics::notePeerAborted(int rank) {
  {
    std::lock_guard lock(causesMutex_);
    if (!causes_.contains(rank)) aborted_.insert(rank);
  }
  notePeerGone(rank);
}

void DeviceDiagnostics::notePeerLeft(int rank) {
  {
    std::lock_guard lock(causesMutex_);
    if (!causes_.contains(rank)) left_.insert(rank);  // a link that failed first stays the cause
  }
  notePeerGone(rank);
}

void DeviceDiagnostics::notePeerGone(int rank, const std::string& cause) {
  if (rank < 0 || rank >= device::kMaxDepartedRanks) return;  // its waits end at their timeout
  {
    // Before the bit: a wait that sees the bit finds the cause for its report.
    std::lock_guard lock(causesMutex_);
    if (!causes_.contains(rank)) causes_.emplace(rank, cause);
  }
  uint64_t* word = &storage_->host()->departed[rank / 64];
  device::AtomicRef<uint64_t>(*word).fetch_or(uint64_t(1) << (rank % 64), device::kRelease);
}

}  // namespace loom
