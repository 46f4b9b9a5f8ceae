#include "ib_queue_pair.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <random>

#include "byte_io.hpp"
#include "loom/error.hpp"

namespace loom {
namespace {

constexpr uint32_t kEndpointMagic = 0x4c494245;  // "LIBE"
constexpr uint16_t kEndpointVersion = 1;
// Outstanding RDMA reads and atomics per queue pair; one is enough for the fetch-and-add signals,
// a few more let them overlap.
constexpr int kMaxRdAtomic = 16;
// 0.12 ms between retries when the peer has no receive posted (signal records in immediate mode).
constexpr uint8_t kMinRnrTimer = 7;
// 7 means "retry forever": a busy receiver is flow control, not a failure.
constexpr uint8_t kRnrRetryForever = 7;
constexpr uint8_t kRetryCount = 7;

IbHandle<ibv_cq> createCq(const IbContext& context, uint32_t entries, const std::string& where) {
  errno = 0;
  IbHandle<ibv_cq> cq(context.api().createCq(context.context(), int(entries), nullptr, nullptr, 0),
                      {context.api().destroyCq});
  if (!cq) throwVerbError(where, "ibv_create_cq", errno != 0 ? errno : ENOMEM);
  return cq;
}

// The local ACK timeout is 4.096 us * 2^exponent and is retried kRetryCount times. Pick the exponent
// whose whole retry budget fits the setup timeout, kept between 14 (67 ms) and 20 (4.3 s, NCCL's
// default): a lost packet must not stall for seconds, and a dead peer must show within the timeout.
uint8_t ackTimeoutExponent(int64_t timeoutMs) {
  const double perTryUs = double(std::max<int64_t>(timeoutMs, 1)) * 1000.0 / (kRetryCount + 1);
  const int exponent = int(std::floor(std::log2(perTryUs / 4.096)));
  return uint8_t(std::clamp(exponent, 14, 20));
}

}  // namespace

std::vector<uint8_t> IbEndpoint::serialize() const {
  ByteWriter out;
  out.put(kEndpointMagic).put(kEndpointVersion);
  out.put(lid).put(qpn).put(psn).put(mtu).put(uint8_t(useGid)).putBytes(gid);
  out.put(signalMode).put(ringAddress).put(ringRkey).put(ringSlots);
  return out.take();
}

IbEndpoint IbEndpoint::parse(std::span<const uint8_t> bytes, const std::string& what) {
  ByteReader in(bytes, what);
  if (in.get<uint32_t>() != kEndpointMagic || in.get<uint16_t>() != kEndpointVersion) {
    throw Error(ErrorCategory::kTransport, what + ": not an InfiniBand endpoint record of this Loom version");
  }
  IbEndpoint endpoint;
  endpoint.lid = in.get<uint16_t>();
  endpoint.qpn = in.get<uint32_t>();
  endpoint.psn = in.get<uint32_t>();
  endpoint.mtu = in.get<uint8_t>();
  endpoint.useGid = in.get<uint8_t>() != 0;
  in.getBytes(endpoint.gid);
  endpoint.signalMode = in.get<IbSignalMode>();
  endpoint.ringAddress = in.get<uint64_t>();
  endpoint.ringRkey = in.get<uint32_t>();
  endpoint.ringSlots = in.get<uint32_t>();
  in.finish();
  if (endpoint.signalMode != IbSignalMode::kAtomic && endpoint.signalMode != IbSignalMode::kWriteWithImm) {
    throw Error(ErrorCategory::kTransport, what + ": unknown signal mode");
  }
  return endpoint;
}

IbQueuePair::IbQueuePair(const IbContext& context, uint32_t sendDepth, uint32_t recvDepth, std::string where)
    : context_(context), where_(std::move(where)), sendDepth_(sendDepth), recvDepth_(recvDepth) {
  std::random_device random;
  psn_ = random() & 0xffffff;
  rdAtomic_ = uint8_t(std::clamp(
      std::min(context.deviceAttr().max_qp_rd_atom, context.deviceAttr().max_qp_init_rd_atom), 1, kMaxRdAtomic));
  // Every work request may complete with an error (a flushed queue reports each one), so the send
  // queue's completion queue holds as many entries as the send queue.
  sendCq_ = createCq(context, sendDepth + 1, where_);
  recvCq_ = createCq(context, recvDepth + 1, where_);
  ibv_qp_init_attr init{};
  init.send_cq = sendCq_.get();
  init.recv_cq = recvCq_.get();
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = sendDepth;
  init.cap.max_recv_wr = recvDepth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  errno = 0;
  qp_ = IbHandle<ibv_qp>(context.api().createQp(context.pd(), &init), {context.api().destroyQp});
  if (!qp_) throwVerbError(where_, "ibv_create_qp", errno != 0 ? errno : ENOMEM);
  toInit();
}

IbEndpoint IbQueuePair::localEndpoint() const {
  IbEndpoint endpoint;
  endpoint.lid = context_.portAttr().lid;
  endpoint.qpn = qp_->qp_num;
  endpoint.psn = psn_;
  endpoint.mtu = uint8_t(context_.portAttr().active_mtu);
  endpoint.useGid = context_.useGid();
  std::copy(std::begin(context_.gid().raw), std::end(context_.gid().raw), endpoint.gid.begin());
  return endpoint;
}

void IbQueuePair::connect(const IbEndpoint& peer, int64_t timeoutMs) {
  if (peer.useGid != context_.useGid()) {
    throw Error(ErrorCategory::kTransport,
                where_ + ": this end addresses its peer by " + (context_.useGid() ? "GID" : "LID") + ", the peer by " +
                    (peer.useGid ? "GID" : "LID") + " (set LOOM_IB_GID_INDEX alike on every rank)");
  }
  toReadyToReceive(peer);
  toReadyToSend(timeoutMs);
}

void IbQueuePair::toInit() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = context_.port();
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  const int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  checkVerb(context_.api().modifyQp(qp_.get(), &attr, mask), where_ + " (to INIT)", "ibv_modify_qp");
}

void IbQueuePair::toReadyToReceive(const IbEndpoint& peer) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = ibv_mtu(std::min<int>(context_.portAttr().active_mtu, peer.mtu));
  attr.dest_qp_num = peer.qpn;
  attr.rq_psn = peer.psn;
  attr.max_dest_rd_atomic = rdAtomic_;
  attr.min_rnr_timer = kMinRnrTimer;
  attr.ah_attr.port_num = context_.port();
  if (context_.useGid()) {
    attr.ah_attr.is_global = 1;
    std::copy(peer.gid.begin(), peer.gid.end(), std::begin(attr.ah_attr.grh.dgid.raw));
    attr.ah_attr.grh.sgid_index = uint8_t(context_.gidIndex());
    attr.ah_attr.grh.hop_limit = 255;
  } else {
    attr.ah_attr.dlid = peer.lid;
  }
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  checkVerb(context_.api().modifyQp(qp_.get(), &attr, mask), where_ + " (to RTR)", "ibv_modify_qp");
}

void IbQueuePair::toReadyToSend(int64_t timeoutMs) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = psn_;
  attr.timeout = ackTimeoutExponent(timeoutMs);
  attr.retry_cnt = kRetryCount;
  attr.rnr_retry = kRnrRetryForever;
  attr.max_rd_atomic = rdAtomic_;
  const int mask =
      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  checkVerb(context_.api().modifyQp(qp_.get(), &attr, mask), where_ + " (to RTS)", "ibv_modify_qp");
}

}  // namespace loom
