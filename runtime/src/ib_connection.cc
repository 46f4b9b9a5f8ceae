// A connection over InfiniBand/RoCE: one reliable-connected queue pair per connection, data as RDMA
// writes, and a value update either as an RDMA fetch-and-add of the difference to the last value
// written (atomic mode) or as a signal record written with immediate data that the receiving side's
// progress thread applies (write-with-immediate mode, ib_signal_receiver.hpp). Both travel on the
// queue pair that carried the data, so they arrive after it: reliable connections execute in order.

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "connection_factory.hpp"
#include "deadline.hpp"
#include "ib_context.hpp"
#include "ib_queue_pair.hpp"
#include "ib_signal_receiver.hpp"
#include "loom/error.hpp"
#include "registered_memory_impl.hpp"

namespace loom {
namespace {

constexpr uint32_t kSendDepth = 256;
constexpr uint32_t kSignalReceives = 128;
// Unsignalled work requests complete silently; every kSignalEvery-th one reports, which frees the
// send queue entries of all before it.
constexpr uint64_t kSignalEvery = 64;
constexpr int kPollBatch = 16;
constexpr uint8_t kReady = 0x52;
// How long a failure the receiver saw waits for the send completions that may name its cause.
constexpr int64_t kCauseDrainMs = 100;

const char* modeName(IbSignalMode mode) {
  return mode == IbSignalMode::kAtomic ? "atomic adds (LOOM_IB_SIGNAL=atomic)"
                                       : "writes with immediate (LOOM_IB_SIGNAL=imm)";
}

class IbConnection final : public Connection {
 public:
  IbConnection(std::shared_ptr<IbContext> context, const ConnectionSetup& setup);

  Transport transport() const override { return Transport::kIb; }
  void write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src, uint64_t srcOffset,
             uint64_t bytes) override;
  void writeValue(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) override;
  void flush(int64_t timeoutMs) override;

  const std::string& where() const { return where_; }
  IbEndpoint localEndpoint() const;
  // Joins the queue pairs (both ends must have exchanged endpoints) and starts receiving signals.
  void connect(const IbEndpoint& peer, int64_t timeoutMs);

 private:
  enum class WrKind : uint8_t { kWrite, kAtomicAdd, kSignalRecord, kFlushMarker };
  struct PostedWr {
    WrKind kind = WrKind::kWrite;
    uint64_t memoryId = 0;
    uint64_t offset = 0;
    uint64_t expectedOld = 0;  // kAtomicAdd: what the word must have held
  };

  void writeAtomic(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value);
  void writeSignalRecord(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value);
  // Waits until the send queue has room for one more (keeping the last entry for flush's marker)
  // and returns the id the next work request gets.
  uint64_t reserve(bool lastEntry = false);
  void submit(ibv_send_wr& wr, const PostedWr& info);
  bool pollCompletions();
  void complete(const ibv_wc& completion);
  // Throws the connection's first failure. A failure the receiver thread saw (flushed receives) is
  // often the echo of a failed send not yet polled here, whose status says more: that wins.
  void throwIfBroken();
  IbSignalRecord& scratchSlot(uint64_t wrId) { return scratch_[wrId % scratch_.size()]; }
  std::string describe(const PostedWr& info, uint64_t wrId) const;

  std::shared_ptr<IbContext> context_;
  std::string where_;
  int64_t postTimeoutMs_;
  IbSignalMode mode_;
  // One slot per send queue entry: the fetched value of an atomic add or an outgoing signal record
  // lives in the slot of its work request until it completes.
  std::vector<IbSignalRecord> scratch_;
  IbHandle<ibv_mr> scratchMr_;
  IbQueuePair queuePair_;
  std::unique_ptr<IbSignalReceiver> receiver_;  // after queuePair_: stops before the queue pair goes
  IbEndpoint peer_;

  // Calls are serialised; the receiver thread touches none of this.
  mutable std::mutex mutex_;
  std::vector<PostedWr> inFlight_;  // by wr id modulo the send depth
  uint64_t posted_ = 0;
  uint64_t completed_ = 0;  // every work request below this id is complete
  bool tailSignalled_ = true;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> lastValues_;  // (registration, offset) -> value
  uint64_t signalsSent_ = 0;
  std::optional<Error> broken_;  // the first failed completion: every later call reports it
};

uint32_t sendDepthFor(const IbContext& context) {
  const ibv_device_attr& attr = context.deviceAttr();
  return uint32_t(std::clamp<int64_t>(std::min<int64_t>(attr.max_qp_wr, int64_t(attr.max_cqe) - 1), 4, kSendDepth));
}

uint32_t signalReceivesFor(const IbContext& context) {
  return uint32_t(std::clamp<int64_t>(context.deviceAttr().max_qp_wr, 1, kSignalReceives));
}

IbConnection::IbConnection(std::shared_ptr<IbContext> context, const ConnectionSetup& setup)
    : Connection(setup.localRank, setup.remoteRank),
      context_(std::move(context)),
      where_("ib connection from rank " + std::to_string(setup.localRank) + " to rank " +
             std::to_string(setup.remoteRank) + " (" + context_->where() + ")"),
      postTimeoutMs_(setup.timeoutMs),
      mode_(context_->config().signalMode),
      scratch_(sendDepthFor(*context_)),
      scratchMr_(context_->registerRegion(scratch_.data(), scratch_.size() * sizeof(IbSignalRecord),
                                          IBV_ACCESS_LOCAL_WRITE, where_ + ": scratch")),
      queuePair_(*context_, uint32_t(scratch_.size()),
                 mode_ == IbSignalMode::kWriteWithImm ? signalReceivesFor(*context_) : 1, where_),
      inFlight_(scratch_.size()) {
  if (mode_ == IbSignalMode::kAtomic && context_->deviceAttr().atomic_cap == IBV_ATOMIC_NONE) {
    throw Error(ErrorCategory::kTransport, where_ + ": the device has no RDMA atomics; set LOOM_IB_SIGNAL=imm");
  }
  if (mode_ == IbSignalMode::kWriteWithImm) {
    receiver_ =
        std::make_unique<IbSignalReceiver>(*context_, queuePair_.qp(), queuePair_.recvCq(), queuePair_.recvDepth(),
                                           "rank " + std::to_string(setup.localRank) + " receiving signals from rank " +
                                               std::to_string(setup.remoteRank) + " (" + context_->where() + ")",
                                           [this](const std::string& why) { failed(why); });
  }
}

IbEndpoint IbConnection::localEndpoint() const {
  IbEndpoint endpoint = queuePair_.localEndpoint();
  endpoint.signalMode = mode_;
  if (receiver_) {
    endpoint.ringAddress = receiver_->ringAddress();
    endpoint.ringRkey = receiver_->ringRkey();
    endpoint.ringSlots = receiver_->ringSlots();
  }
  return endpoint;
}

void IbConnection::connect(const IbEndpoint& peer, int64_t timeoutMs) {
  if (peer.signalMode != mode_) {
    throw Error(ErrorCategory::kTransport, where_ + ": rank " + std::to_string(localRank()) + " signals with " +
                                               modeName(mode_) + ", rank " + std::to_string(remoteRank()) + " with " +
                                               modeName(peer.signalMode) + "; set it alike on every rank");
  }
  if (mode_ == IbSignalMode::kWriteWithImm && peer.ringSlots == 0) {
    throw Error(ErrorCategory::kTransport, where_ + ": the peer sent no signal ring");
  }
  peer_ = peer;
  queuePair_.connect(peer, timeoutMs);
  if (receiver_) receiver_->start();
}

void IbConnection::write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src,
                         uint64_t srcOffset, uint64_t bytes) {
  checkWrite(dst, dstOffset, src, srcOffset, bytes);
  std::lock_guard lock(mutex_);
  throwIfBroken();
  // Messages above the port's limit are split; each piece is one work request.
  const uint64_t maxBytes = context_->maxMessageBytes();
  const uint64_t srcAddress = reinterpret_cast<uint64_t>(src.data()) + srcOffset;
  const uint64_t dstAddress = dst.originalAddress() + dstOffset;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t piece = std::min(bytes - done, maxBytes);
    ibv_sge sge{srcAddress + done, uint32_t(piece), src.impl().ibLkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = dstAddress + done;
    wr.wr.rdma.rkey = dst.impl().ibRkey;
    reserve();
    submit(wr, PostedWr{WrKind::kWrite, dst.impl().id, dstOffset + done, 0});
    done += piece;
  }
}

void IbConnection::writeValue(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) {
  checkValue(dst, dstOffset);
  std::lock_guard lock(mutex_);
  throwIfBroken();
  if (mode_ == IbSignalMode::kAtomic) {
    writeAtomic(dst, dstOffset, value);
  } else {
    writeSignalRecord(dst, dstOffset, value);
  }
}

// The caller is the only writer of the word, so adding the difference to the last value it wrote
// stores `value` (modulo 2^64). The fetched old value is checked at completion: a mismatch means the
// word did not start at 0 or someone else writes it too.
void IbConnection::writeAtomic(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) {
  const auto key = std::make_pair(dst.impl().id, dstOffset);
  const auto found = lastValues_.find(key);
  const uint64_t last = found == lastValues_.end() ? 0 : found->second;
  const uint64_t id = reserve();
  ibv_sge sge{reinterpret_cast<uint64_t>(&scratchSlot(id).value), sizeof(uint64_t), scratchMr_->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = dst.originalAddress() + dstOffset;
  wr.wr.atomic.compare_add = value - last;
  wr.wr.atomic.rkey = dst.impl().ibRkey;
  submit(wr, PostedWr{WrKind::kAtomicAdd, dst.impl().id, dstOffset, last});
  lastValues_[key] = value;
}

void IbConnection::writeSignalRecord(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) {
  const uint64_t id = reserve();
  const uint32_t slot = uint32_t(signalsSent_ % peer_.ringSlots);
  IbSignalRecord& record = scratchSlot(id);
  record = IbSignalRecord{dst.impl().id, dstOffset, value, signalsSent_};
  ibv_sge sge{reinterpret_cast<uint64_t>(&record), sizeof(record), scratchMr_->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.imm_data = htonl(slot);
  wr.wr.rdma.remote_addr = peer_.ringAddress + uint64_t(slot) * sizeof(IbSignalRecord);
  wr.wr.rdma.rkey = peer_.ringRkey;
  submit(wr, PostedWr{WrKind::kSignalRecord, dst.impl().id, dstOffset, 0});
  ++signalsSent_;
}

// Complete means acknowledged by the peer's adapter: written data is in place there. A signal
// record in immediate mode has reached the peer's ring; its progress thread stores the value
// moments later (and the peer's waits poll for it anyway).
void IbConnection::flush(int64_t timeoutMs) {
  std::lock_guard lock(mutex_);
  throwIfBroken();
  Deadline deadline(timeoutMs);
  if (completed_ < posted_ && !tailSignalled_) {
    // Only a signalled request reports completion: end the queue with an empty, signalled write.
    // A zero-length RDMA write checks no remote key.
    reserve(/*lastEntry=*/true);
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    submit(wr, PostedWr{WrKind::kFlushMarker});
  }
  while (completed_ < posted_) {
    if (!pollCompletions()) {
      if (deadline.expired()) {
        throw Error(ErrorCategory::kTimeout, where_ + ": flush: " + std::to_string(posted_ - completed_) + " of " +
                                                 std::to_string(posted_) + " work requests still outstanding after " +
                                                 std::to_string(timeoutMs) + " ms");
      }
      std::this_thread::yield();
    }
    throwIfBroken();
  }
  throwIfBroken();
}

uint64_t IbConnection::reserve(bool lastEntry) {
  const uint64_t limit = inFlight_.size() - (lastEntry ? 0 : 1);
  if (posted_ - completed_ < limit) return posted_;
  Deadline deadline(postTimeoutMs_);
  while (posted_ - completed_ >= limit) {
    if (!pollCompletions()) {
      if (deadline.expired()) {
        throw Error(ErrorCategory::kTimeout,
                    where_ + ": the send queue stayed full (" + std::to_string(posted_ - completed_) +
                        " work requests outstanding) for " + std::to_string(postTimeoutMs_) + " ms");
      }
      std::this_thread::yield();
    }
    throwIfBroken();
  }
  return posted_;
}

void IbConnection::submit(ibv_send_wr& wr, const PostedWr& info) {
  const uint64_t id = posted_;
  // Atomic adds report so that their fetched value is checked; the flush marker reports by design.
  const bool signalled =
      info.kind == WrKind::kAtomicAdd || info.kind == WrKind::kFlushMarker || (id + 1) % kSignalEvery == 0;
  wr.wr_id = id;
  wr.next = nullptr;
  wr.send_flags = signalled ? IBV_SEND_SIGNALED : 0;
  inFlight_[id % inFlight_.size()] = info;
  ibv_send_wr* bad = nullptr;
  checkVerb(context_->api().postSend(queuePair_.qp(), &wr, &bad), where_, "ibv_post_send");
  ++posted_;
  tailSignalled_ = signalled;
}

bool IbConnection::pollCompletions() {
  ibv_wc completions[kPollBatch];
  const int count = context_->api().pollCq(queuePair_.sendCq(), kPollBatch, completions);
  if (count < 0) {
    const int error = errno != 0 ? errno : EIO;
    broken_ = Error(ErrorCategory::kTransport, where_ + ": ibv_poll_cq failed: " + std::strerror(error));
    failed(broken_->what());
    throw *broken_;
  }
  for (int i = 0; i < count; ++i) complete(completions[i]);
  return count > 0;
}

void IbConnection::complete(const ibv_wc& completion) {
  const uint64_t id = completion.wr_id;
  const PostedWr& info = inFlight_[id % inFlight_.size()];
  // Completions come in order, and a failed queue pair flushes every later request with an error,
  // so the id of any completion is a lower bound for what is done.
  completed_ = std::max(completed_, id + 1);
  if (broken_) return;
  if (completion.status != IBV_WC_SUCCESS) {
    broken_ =
        Error(ErrorCategory::kTransport,
              where_ + ": " + describe(info, id) + " failed at rank " + std::to_string(localRank()) + " with status '" +
                  wcStatusText(context_->api(), completion.status) + "' (" + std::to_string(int(completion.status)) +
                  ", vendor error " + std::to_string(completion.vendor_err) + ")");
    failed(broken_->what());  // a queue pair in error carries nothing more
    return;
  }
  if (info.kind == WrKind::kAtomicAdd) {
    const uint64_t old = std::atomic_ref<uint64_t>(scratchSlot(id).value).load(std::memory_order_acquire);
    if (old != info.expectedOld) {
      broken_ = Error(ErrorCategory::kInvalidArgument,
                      where_ + ": " + describe(info, id) + " found " + std::to_string(old) + " in the word, not " +
                          std::to_string(info.expectedOld) +
                          ", the last value this connection wrote there (the word must start at 0 and have "
                          "no other writer)");
    }
  }
}

std::string IbConnection::describe(const PostedWr& info, uint64_t wrId) const {
  const std::string target = " to rank " + std::to_string(remoteRank()) + "'s registration " +
                             std::to_string(info.memoryId) + " offset " + std::to_string(info.offset) +
                             " (work request " + std::to_string(wrId) + ")";
  switch (info.kind) {
    case WrKind::kWrite:
      return "RDMA write" + target;
    case WrKind::kAtomicAdd:
      return "writeValue as RDMA fetch-and-add" + target;
    case WrKind::kSignalRecord:
      return "writeValue as RDMA write with immediate" + target;
    case WrKind::kFlushMarker:
      return "flush marker (zero-length RDMA write, work request " + std::to_string(wrId) + ")";
  }
  return "work request " + std::to_string(wrId);
}

void IbConnection::throwIfBroken() {
  if (broken_) throw *broken_;
  if (!receiver_) return;
  std::optional<std::string> failure = receiver_->failure();
  if (!failure) return;
  // A queue pair in the error state completes every outstanding send at once (flushed or with the
  // real status), so a short drain finds the cause if it was on this side.
  Deadline drain(kCauseDrainMs);
  while (!broken_ && completed_ < posted_ && !drain.expired()) {
    if (!pollCompletions()) std::this_thread::yield();
  }
  if (broken_) throw *broken_;
  throw Error(ErrorCategory::kTransport, *failure);
}

}  // namespace

std::shared_ptr<Connection> connectIb(IbContext& context, const ConnectionSetup& setup) {
  auto connection = std::make_shared<IbConnection>(context.shared_from_this(), setup);
  setup.bootstrap.send(setup.remoteRank, setup.tag, connection->localEndpoint().serialize());
  const Bootstrap::Bytes reply = setup.bootstrap.recv(setup.remoteRank, setup.tag);
  connection->connect(IbEndpoint::parse(reply, connection->where() + ": the peer's endpoint"), setup.timeoutMs);
  // Neither end posts before the other is ready to receive: a packet that reaches a queue pair not
  // yet in RTR is dropped and costs a retry timeout.
  const uint8_t ready = kReady;
  setup.bootstrap.send(setup.remoteRank, setup.tag, std::span(&ready, 1));
  const Bootstrap::Bytes answer = setup.bootstrap.recv(setup.remoteRank, setup.tag);
  if (answer.size() != 1 || answer[0] != kReady) {
    throw Error(ErrorCategory::kTransport, connection->where() + ": the peer did not confirm it is ready");
  }
  return connection;
}

}  // namespace loom
