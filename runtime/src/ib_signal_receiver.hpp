#pragma once

// The receiving side of write-with-immediate signalling. A sender's writeValue is an RDMA write of
// an IbSignalRecord (which registration, offset, value) into a ring slot of the receiver, with the
// slot index as immediate data. Because the record travels on the queue pair that carried the
// data, its receive completion comes after every earlier write is in place. A progress thread
// polls the receive completions, stores each value into local memory found in the process's
// MemoryTable (after checking the range), and posts the receive again.
//
// Flow control: the ring has twice as many slots as receives are posted, and the queue pair
// retries forever on receiver-not-ready. A record lands only after its predecessor consumed a
// receive, which happens only after the record `receives` places back was read and its receive
// reposted; so no record can overwrite a slot that is still unread, even on hardware that places
// the data before it looks for a receive.

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ib_context.hpp"

namespace loom {

struct IbSignalRecord {
  uint64_t memoryId;  // the receiver's registration (MemoryTable id)
  uint64_t offset;    // 8-byte aligned, inside it
  uint64_t value;
  uint64_t sequence;  // the sender's count of records before this one, checked by the receiver
};
static_assert(sizeof(IbSignalRecord) == 32);

class IbSignalReceiver {
 public:
  // Registers the ring and posts `receives` receives on `qp`, which must be in INIT or later. `failed`
  // hears the first failure (from the progress thread).
  IbSignalReceiver(const IbContext& context, ibv_qp* qp, ibv_cq* recvCq, uint32_t receives, std::string where,
                   std::function<void(const std::string&)> failed = {});
  ~IbSignalReceiver() = default;  // the thread member is declared last: joined before the ring goes
  IbSignalReceiver(const IbSignalReceiver&) = delete;
  IbSignalReceiver& operator=(const IbSignalReceiver&) = delete;

  uint64_t ringAddress() const { return reinterpret_cast<uint64_t>(ring_.data()); }
  uint32_t ringRkey() const { return ringMr_->rkey; }
  uint32_t ringSlots() const { return uint32_t(ring_.size()); }

  // Starts the progress thread (once the queue pair is connected).
  void start();
  // The first failure the progress thread met (an error completion, a bad record); it stops then.
  std::optional<std::string> failure() const;

 private:
  void run(const std::stop_token& stop);
  bool pollOnce();  // false when nothing arrived
  void apply(const ibv_wc& completion);
  void store(const IbSignalRecord& record);
  void postReceives(uint32_t count);
  void fail(std::string message, bool warn = true);

  const IbContext& context_;
  ibv_qp* qp_;
  ibv_cq* recvCq_;
  std::string where_;
  std::function<void(const std::string&)> failed_;
  std::vector<IbSignalRecord> ring_;
  IbHandle<ibv_mr> ringMr_;
  uint64_t nextSequence_ = 0;  // touched by the progress thread only
  mutable std::mutex mutex_;
  std::optional<std::string> failure_;
  std::jthread thread_;
};

}  // namespace loom
