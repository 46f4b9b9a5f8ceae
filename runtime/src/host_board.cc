#include "loom/host_board.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "loom/error.hpp"
#include "loom/rank_list.hpp"
#include "loom/registered_memory.hpp"
#include "loom/shared_host_memory.hpp"
#include "loom/transport.hpp"

namespace loom {
namespace {

bool anyOf(const std::vector<int>& ranks, const std::vector<int>& among) {
  for (int rank : ranks) {
    if (std::find(among.begin(), among.end(), rank) != among.end()) return true;
  }
  return false;
}

constexpr uint64_t kSlotBytes = 256;  // the sequence word and the record: four cache lines at most
constexpr uint64_t kSlots = 2;
constexpr std::chrono::milliseconds kSpinOnly{2};  // then a short sleep every 1,024 polls

uint64_t* sequenceOf(uint8_t* slots, uint64_t exchange) {
  return reinterpret_cast<uint64_t*>(slots + (exchange % kSlots) * kSlotBytes);
}
uint8_t* recordOf(uint8_t* slots, uint64_t exchange) { return slots + (exchange % kSlots) * kSlotBytes + 8; }

// Slots of boards in this process, by address: a peer that is a thread of this process reads them
// where they are, and holds them, so that a rank that leaves early (its board gone) frees nothing that
// a peer still spins on.
std::mutex boardsMutex;
std::map<const void*, std::weak_ptr<void>> boardsInProcess;

}  // namespace

struct HostBoard::Impl {
  Communicator& communicator;
  uint32_t recordBytes;
  std::shared_ptr<void> memory;  // this rank's slots (shared host memory when a host peer is another process)
  uint8_t* mine = nullptr;
  RegisteredMemory registration;
  std::vector<RegisteredMemory> peers;      // by rank; this rank's own left empty
  std::vector<std::shared_ptr<void>> held;  // slots of peers that are threads of this process
  std::vector<uint8_t*> slots;              // every rank's slots as mapped here, by rank
  uint64_t exchanges = 0;
  bool broken = false;

  Impl(Communicator& communicator, uint32_t recordBytes) : communicator(communicator), recordBytes(recordBytes) {}
  ~Impl() {
    std::lock_guard lock(boardsMutex);
    std::erase_if(boardsInProcess, [](const auto& entry) { return entry.second.expired(); });
  }

  std::string where() const {
    return "host board of rank " + std::to_string(communicator.rank()) + " of " +
           std::to_string(communicator.worldSize());
  }

  // Spins until every rank's slot holds `exchange`; returns the ranks still missing at the deadline
  // (empty once all are there).
  std::vector<int> waitForAll(uint64_t exchange) {
    const auto start = std::chrono::steady_clock::now();
    const auto timeout = std::chrono::milliseconds(communicator.bootstrap().timeoutMs());
    auto nextCheck = start + std::chrono::milliseconds(100);
    std::vector<int> missing;
    for (uint32_t spins = 1;; ++spins) {
      missing.clear();
      for (size_t rank = 0; rank < slots.size(); ++rank) {
        if (std::atomic_ref<uint64_t>(*sequenceOf(slots[rank], exchange)).load(std::memory_order_acquire) != exchange) {
          missing.push_back(int(rank));
        }
      }
      if (missing.empty()) return missing;
      if ((spins & 63) == 0) std::this_thread::yield();
      if ((spins & 1023) == 0) {
        const auto now = std::chrono::steady_clock::now();
        if (now - start >= timeout) return missing;
        // Peers normally post within microseconds; one that computes first may take milliseconds, and
        // a waiter that spins all that time takes a core from the work it waits for.
        if (now - start >= kSpinOnly) std::this_thread::sleep_for(std::chrono::microseconds(20));
        if (now >= nextCheck) {
          communicator.bootstrap().checkInterrupt();
          // A missing rank whose process is gone never posts: say so now, not at the timeout.
          if (anyOf(missing, communicator.bootstrap().departedPeers())) return missing;
          nextCheck = now + std::chrono::milliseconds(100);
        }
      }
    }
  }
};

HostBoard::HostBoard(Communicator& communicator, uint32_t recordBytes, uint64_t tag)
    : impl_(std::make_unique<Impl>(communicator, recordBytes)) {
  Impl& impl = *impl_;
  if (recordBytes == 0 || recordBytes > kMaxRecordBytes) {
    throw Error(ErrorCategory::kInvalidArgument, impl.where() + ": a record holds 1 to " +
                                                     std::to_string(kMaxRecordBytes) + " bytes, not " +
                                                     std::to_string(recordBytes));
  }
  if (communicator.nodeCount() != 1) {
    throw Error(ErrorCategory::kInvalidArgument,
                impl.where() + ": the ranks run on " + std::to_string(communicator.nodeCount()) + " hosts, not one");
  }
  const uint64_t bytes = kSlots * kSlotBytes;
  if (communicator.hostPeersInOtherProcesses()) {
    auto shared = std::make_shared<SharedHostBuffer>(bytes);
    impl.memory = std::shared_ptr<void>(shared, shared->data());
  } else {
    impl.memory = std::shared_ptr<uint64_t[]>(new uint64_t[bytes / 8]());
  }
  impl.mine = static_cast<uint8_t*>(impl.memory.get());
  {
    std::lock_guard lock(boardsMutex);
    boardsInProcess[impl.mine] = impl.memory;
  }
  impl.registration = communicator.registerMemory(impl.mine, bytes, Transport::kTcp);
  const int world = communicator.worldSize();
  for (int peer = 0; peer < world; ++peer) {
    if (peer != communicator.rank()) communicator.sendMemory(impl.registration, peer, tag);
  }
  impl.peers.resize(size_t(world));
  impl.slots.resize(size_t(world));
  for (int peer = 0; peer < world; ++peer) {
    if (peer == communicator.rank()) {
      impl.slots[size_t(peer)] = impl.mine;
      continue;
    }
    impl.peers[size_t(peer)] = communicator.recvMemory(peer, tag);
    impl.slots[size_t(peer)] = static_cast<uint8_t*>(impl.peers[size_t(peer)].data());
    if (communicator.sameProcess(peer)) {
      std::lock_guard lock(boardsMutex);
      auto found = boardsInProcess.find(impl.slots[size_t(peer)]);
      std::shared_ptr<void> slots = found != boardsInProcess.end() ? found->second.lock() : nullptr;
      if (!slots) impl.slots[size_t(peer)] = nullptr;  // refused below
      impl.held.push_back(std::move(slots));
    }
    if (impl.slots[size_t(peer)] == nullptr || impl.peers[size_t(peer)].bytes() < bytes) {
      throw Error(ErrorCategory::kInvalidArgument,
                  impl.where() + ": rank " + std::to_string(peer) + "'s slots are not mapped in this process");
    }
  }
  // No rank may drop its board (and, in this process, its slots) before every peer holds them.
  communicator.bootstrap().barrier();
}

HostBoard::~HostBoard() = default;

namespace {

// Why the `departed` peers are gone: those that announced an abort, those whose link was lost, those whose
// connection closed.
std::string departureText(const std::vector<int>& departed, const std::vector<int>& aborted,
                          const std::map<int, std::string>& links) {
  std::vector<int> closed;
  for (int peer : departed) {
    if (std::find(aborted.begin(), aborted.end(), peer) == aborted.end() && !links.contains(peer)) {
      closed.push_back(peer);
    }
  }
  std::string text;
  if (!aborted.empty()) text = rankList(aborted) + " aborted its communicator (it announced the abort)";
  for (const auto& [peer, link] : links) text += (text.empty() ? "" : "; ") + link;
  if (!closed.empty()) {
    text += (text.empty() ? "" : "; ") + std::string("the bootstrap connection of ") + rankList(closed) +
            " was closed (their process is gone)";
  }
  return text;
}

}  // namespace

std::vector<std::vector<uint8_t>> HostBoard::allGather(std::span<const uint8_t> mine) {
  Impl& impl = *impl_;
  if (impl.broken) throw Error(ErrorCategory::kInvalidArgument, impl.where() + " is unusable after an earlier failure");
  if (mine.size() != impl.recordBytes) {
    throw Error(ErrorCategory::kInvalidArgument, impl.where() + ": a record of " + std::to_string(mine.size()) +
                                                     " bytes, the board takes " + std::to_string(impl.recordBytes));
  }
  const uint64_t exchange = ++impl.exchanges;
  std::memcpy(recordOf(impl.mine, exchange), mine.data(), mine.size());
  std::atomic_ref<uint64_t>(*sequenceOf(impl.mine, exchange)).store(exchange, std::memory_order_release);
  std::vector<int> missing;
  try {
    missing = impl.waitForAll(exchange);
  } catch (...) {
    impl.broken = true;
    throw;
  }
  if (!missing.empty()) {
    impl.broken = true;
    const std::vector<int> departed = impl.communicator.bootstrap().departedPeers();
    const std::string closed = departureText(departed, impl.communicator.bootstrap().abortedPeers(),
                                             impl.communicator.bootstrap().lostLinks());
    if (anyOf(missing, departed)) {
      throw Error(ErrorCategory::kTransport, impl.where() + ": " + rankList(missing) + " did not post exchange " +
                                                 std::to_string(exchange) + ": " + closed);
    }
    throw Error(ErrorCategory::kTimeout, impl.where() + ": " + rankList(missing) + " did not post exchange " +
                                             std::to_string(exchange) + " within " +
                                             std::to_string(impl.communicator.bootstrap().timeoutMs()) + " ms" +
                                             (departed.empty() ? std::string() : "; " + closed));
  }
  std::vector<std::vector<uint8_t>> records(impl.slots.size());
  for (size_t rank = 0; rank < impl.slots.size(); ++rank) {
    const uint8_t* record = recordOf(impl.slots[rank], exchange);
    records[rank].assign(record, record + impl.recordBytes);
  }
  return records;
}

}  // namespace loom
