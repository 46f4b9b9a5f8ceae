#pragma once

// A reliable-connected queue pair with its own send and receive completion queues, and the record
// the two ends of a connection exchange to join their queue pairs (RESET -> INIT -> RTR -> RTS).

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ib_context.hpp"

namespace loom {

// What one end tells the other at connect time. The ring fields describe the receiving end's ring
// of signal records (write-with-immediate mode only).
struct IbEndpoint {
  uint16_t lid = 0;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint8_t mtu = 0;  // an ibv_mtu
  bool useGid = false;
  std::array<uint8_t, 16> gid{};
  IbSignalMode signalMode = IbSignalMode::kAtomic;
  uint64_t ringAddress = 0;
  uint32_t ringRkey = 0;
  uint32_t ringSlots = 0;

  std::vector<uint8_t> serialize() const;
  static IbEndpoint parse(std::span<const uint8_t> bytes, const std::string& what);
};

class IbQueuePair {
 public:
  // Creates the completion queues and the queue pair and moves it to INIT, where receives may be
  // posted. `where` names the connection in errors.
  IbQueuePair(const IbContext& context, uint32_t sendDepth, uint32_t recvDepth, std::string where);

  ibv_qp* qp() const { return qp_.get(); }
  ibv_cq* sendCq() const { return sendCq_.get(); }
  ibv_cq* recvCq() const { return recvCq_.get(); }
  uint32_t sendDepth() const { return sendDepth_; }
  uint32_t recvDepth() const { return recvDepth_; }

  // This end's address, queue pair number and first packet sequence number (no ring fields).
  IbEndpoint localEndpoint() const;
  // INIT -> RTR -> RTS towards `peer`. The ACK timeout is derived from `timeoutMs`.
  void connect(const IbEndpoint& peer, int64_t timeoutMs);

 private:
  void toInit();
  void toReadyToReceive(const IbEndpoint& peer);
  void toReadyToSend(int64_t timeoutMs);

  const IbContext& context_;
  std::string where_;
  uint32_t sendDepth_;
  uint32_t recvDepth_;
  uint32_t psn_;
  uint8_t rdAtomic_;
  IbHandle<ibv_cq> sendCq_;
  IbHandle<ibv_cq> recvCq_;
  IbHandle<ibv_qp> qp_;  // declared last: destroyed before the completion queues it uses
};

}  // namespace loom
