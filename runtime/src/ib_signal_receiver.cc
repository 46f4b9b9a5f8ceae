#include "ib_signal_receiver.hpp"

#include <arpa/inet.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "gpu.hpp"
#include "log.hpp"
#include "loom/error.hpp"
#include "memory_table.hpp"

namespace loom {
namespace {

constexpr int kPollBatch = 16;
// Polls that find nothing before the thread starts sleeping between polls: a signal right after
// another is picked up at once, while an idle connection does not keep a core busy.
constexpr int kSpinPolls = 2000;
constexpr auto kIdleSleep = std::chrono::microseconds(50);

}  // namespace

IbSignalReceiver::IbSignalReceiver(const IbContext& context, ibv_qp* qp, ibv_cq* recvCq, uint32_t receives,
                                   std::string where, std::function<void(const std::string&)> failed)
    : context_(context),
      qp_(qp),
      recvCq_(recvCq),
      where_(std::move(where)),
      failed_(std::move(failed)),
      ring_(2 * size_t(receives)) {
  ringMr_ = context.registerRegion(ring_.data(), ring_.size() * sizeof(IbSignalRecord),
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, where_ + ": signal ring");
  postReceives(receives);
}

void IbSignalReceiver::start() {
  thread_ = std::jthread([this](const std::stop_token& stop) { run(stop); });
}

std::optional<std::string> IbSignalReceiver::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void IbSignalReceiver::run(const std::stop_token& stop) {
  int idlePolls = 0;
  while (!stop.stop_requested()) {
    try {
      if (pollOnce()) {
        idlePolls = 0;
        continue;
      }
    } catch (const std::exception& error) {
      fail(error.what());
    }
    if (failure()) return;
    if (++idlePolls < kSpinPolls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kIdleSleep);
    }
  }
}

bool IbSignalReceiver::pollOnce() {
  ibv_wc completions[kPollBatch];
  const int count = context_.api().pollCq(recvCq_, kPollBatch, completions);
  if (count < 0) throwVerbError(where_, "ibv_poll_cq", errno != 0 ? errno : EIO);
  for (int i = 0; i < count; ++i) {
    // Flushed receives only follow an error that put the queue pair in the error state, which the
    // sending side reports itself: stop quietly.
    if (completions[i].status == IBV_WC_WR_FLUSH_ERR) {
      fail(where_ + ": receives flushed (the queue pair failed)", /*warn=*/false);
      return false;
    }
    apply(completions[i]);
  }
  if (count > 0) postReceives(uint32_t(count));
  return count > 0;
}

void IbSignalReceiver::apply(const ibv_wc& completion) {
  if (completion.status != IBV_WC_SUCCESS) {
    throw Error(ErrorCategory::kTransport, where_ + ": a receive completed with status '" +
                                               wcStatusText(context_.api(), completion.status) + "' (" +
                                               std::to_string(int(completion.status)) + ")");
  }
  const uint32_t slot = ntohl(completion.imm_data);
  const uint64_t expectedSlot = nextSequence_ % ring_.size();
  if ((completion.wc_flags & IBV_WC_WITH_IMM) == 0 || slot != expectedSlot) {
    throw Error(ErrorCategory::kTransport, where_ + ": signal record " + std::to_string(nextSequence_) +
                                               " arrived in slot " + std::to_string(slot) + ", expected slot " +
                                               std::to_string(expectedSlot));
  }
  // Copied out before the receive is posted again: only then may the sender reuse the slot.
  const IbSignalRecord record = ring_[slot];
  if (record.sequence != nextSequence_) {
    throw Error(ErrorCategory::kTransport, where_ + ": slot " + std::to_string(slot) + " holds signal record " +
                                               std::to_string(record.sequence) + ", expected record " +
                                               std::to_string(nextSequence_));
  }
  ++nextSequence_;
  store(record);
}

void IbSignalReceiver::store(const IbSignalRecord& record) {
  const std::optional<LocalMemory> memory = MemoryTable::process().find(record.memoryId);
  const std::string target =
      "registration " + std::to_string(record.memoryId) + " offset " + std::to_string(record.offset);
  if (!memory) {
    throw Error(ErrorCategory::kTransport, where_ + ": a signal names " + target + ", which is not registered here");
  }
  if (record.offset % 8 != 0 || record.offset > memory->bytes || memory->bytes - record.offset < 8) {
    throw Error(ErrorCategory::kTransport, where_ + ": a signal names " + target + ", not an aligned word of its " +
                                               std::to_string(memory->bytes) + " bytes");
  }
  auto* word = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(memory->data) + record.offset);
  if (memory->location == MemoryLocation::kDevice) {
    gpu::copy(word, &record.value, sizeof(record.value));
  } else {
    // Release: a host reader that acquires the value also sees the data that came before it.
    std::atomic_ref<uint64_t>(*word).store(record.value, std::memory_order_release);
  }
}

void IbSignalReceiver::postReceives(uint32_t count) {
  // Writes with immediate data scatter nothing: the receives carry no buffers.
  std::vector<ibv_recv_wr> receives(count);
  for (uint32_t i = 0; i < count; ++i) {
    receives[i].wr_id = i;
    receives[i].next = i + 1 < count ? &receives[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  checkVerb(context_.api().postRecv(qp_, receives.data(), &bad), where_, "ibv_post_recv");
}

void IbSignalReceiver::fail(std::string message, bool warn) {
  {
    std::lock_guard lock(mutex_);
    if (failure_) return;
    // Said at once too: nobody may call this connection again to hear about it.
    if (warn) logWarning(message);
    failure_ = message;
  }
  if (failed_) failed_(message);
}

}  // namespace loom
