#include "fake_ibverbs.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace loom::testing {
namespace {

constexpr uint16_t kLid = 7;
constexpr int kGidTableLength = 4;
constexpr uint32_t kMaxQpWr = 1024;
constexpr int kMaxCqe = 4096;
constexpr int kMaxSge = 4;
constexpr int kBlocked = -1;  // a send that waits for the peer to post a receive

struct Settings {
  uint32_t maxMessageBytes = 1u << 31;
  ibv_port_state portState = IBV_PORT_ACTIVE;
  bool ethernet = false;
  bool atomics = true;
  int failRegMr = 0;
  std::optional<ibv_wc_status> failSend;
  bool stalled = false;
};

struct FakeMr {
  ibv_mr mr{};
  int access = 0;
};

struct CqEntry {
  ibv_wc wc{};
  bool send = false;
  uint64_t sendIndex = 0;  // frees the send queue up to here when polled
};

struct FakeCq {
  ibv_cq cq{};
  std::deque<CqEntry> entries;
  bool overrun = false;
};

struct PendingSend {
  ibv_send_wr wr{};
  std::vector<ibv_sge> sges;
  uint64_t index = 0;
};

struct FakeQp {
  ibv_qp qp{};
  uint32_t maxSend = 0;
  uint32_t maxRecv = 0;
  int access = 0;
  uint32_t remoteQpn = 0;
  uint32_t rqPsn = 0;
  uint32_t sqPsn = 0;
  uint8_t rnrRetry = 0;
  uint8_t maxDestRdAtomic = 0;
  uint8_t maxRdAtomic = 0;
  uint64_t sendPosted = 0;
  uint64_t sendFreed = 0;
  std::deque<uint64_t> receives;
  std::deque<PendingSend> pending;
};

struct State {
  std::mutex mutex;
  Settings settings;
  ibv_device device{};
  size_t deviceLists = 0;
  std::map<ibv_context*, std::unique_ptr<ibv_context>> contexts;
  std::map<ibv_pd*, std::unique_ptr<ibv_pd>> pds;
  std::map<ibv_mr*, std::unique_ptr<FakeMr>> mrs;
  std::map<uint32_t, FakeMr*> mrByKey;
  std::map<ibv_cq*, std::unique_ptr<FakeCq>> cqs;
  std::map<ibv_qp*, std::unique_ptr<FakeQp>> qps;
  std::map<uint32_t, FakeQp*> qpByNumber;
  uint32_t nextKey = 0x1001;
  uint32_t nextQpn = 0x100;
  uint64_t writesExecuted = 0;

  State() { std::strncpy(device.name, "fake_ib0", sizeof(device.name) - 1); }
};

State& state() {
  static State* instance = new State();  // never destroyed: registrations may outlive main
  return *instance;
}

ibv_gid gidAt(int index) {
  ibv_gid gid{};
  gid.raw[0] = 0xfe;
  gid.raw[1] = 0x80;
  gid.raw[15] = uint8_t(index + 1);
  return gid;
}

int fail(int error) {
  errno = error;
  return error;
}

bool covers(const FakeMr& mr, uint64_t address, uint64_t bytes) {
  const uint64_t start = reinterpret_cast<uint64_t>(mr.mr.addr);
  return address >= start && address - start <= mr.mr.length && bytes <= mr.mr.length - (address - start);
}

// The region behind `key` in protection domain `pd` covering the range with the access asked for.
FakeMr* regionFor(State& s, uint32_t key, ibv_pd* pd, uint64_t address, uint64_t bytes, int access) {
  auto it = s.mrByKey.find(key);
  if (it == s.mrByKey.end()) return nullptr;
  FakeMr* mr = it->second;
  if (mr->mr.pd != pd || (mr->access & access) != access || !covers(*mr, address, bytes)) return nullptr;
  return mr;
}

void push(FakeCq& cq, const CqEntry& entry) {
  // A full completion queue overruns, as on hardware; the next poll reports it.
  if (cq.entries.size() >= size_t(cq.cq.cqe)) {
    cq.overrun = true;
    return;
  }
  cq.entries.push_back(entry);
}

FakeCq& cqOf(State& s, ibv_cq* cq) { return *s.cqs.at(cq); }

// Moving to the error state flushes posted receives, as hardware does.
void flushReceives(State& s, FakeQp& qp) {
  for (uint64_t id : qp.receives) {
    CqEntry entry;
    entry.wc.wr_id = id;
    entry.wc.status = IBV_WC_WR_FLUSH_ERR;
    entry.wc.qp_num = qp.qp.qp_num;
    push(cqOf(s, qp.qp.recv_cq), entry);
  }
  qp.receives.clear();
}

void completeSend(State& s, FakeQp& qp, const PendingSend& send, ibv_wc_status status) {
  const bool signalled = (send.wr.send_flags & IBV_SEND_SIGNALED) != 0;
  // Errors (and the flushes after one) always complete; successes only when signalled.
  if (status == IBV_WC_SUCCESS && !signalled) return;
  CqEntry entry;
  entry.wc.wr_id = send.wr.wr_id;
  entry.wc.status = status;
  entry.wc.opcode = send.wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? IBV_WC_FETCH_ADD : IBV_WC_RDMA_WRITE;
  entry.wc.qp_num = qp.qp.qp_num;
  entry.send = true;
  entry.sendIndex = send.index;
  push(cqOf(s, qp.qp.send_cq), entry);
  if (status != IBV_WC_SUCCESS && qp.qp.state != IBV_QPS_ERR) {
    qp.qp.state = IBV_QPS_ERR;
    flushReceives(s, qp);
  }
}

bool localSgesValid(State& s, FakeQp& qp, const PendingSend& send, int access) {
  for (const ibv_sge& sge : send.sges) {
    if (regionFor(s, sge.lkey, qp.qp.pd, sge.addr, sge.length, access) == nullptr) return false;
  }
  return true;
}

int performWrite(State& s, FakeQp& qp, FakeQp& peer, const PendingSend& send) {
  uint64_t bytes = 0;
  for (const ibv_sge& sge : send.sges) bytes += sge.length;
  if (bytes > s.settings.maxMessageBytes) return IBV_WC_LOC_LEN_ERR;
  if (!localSgesValid(s, qp, send, 0)) return IBV_WC_LOC_PROT_ERR;
  const uint64_t remote = send.wr.wr.rdma.remote_addr;
  // A zero-length write checks no remote key, as the InfiniBand specification says.
  if (bytes > 0 && (regionFor(s, send.wr.wr.rdma.rkey, peer.qp.pd, remote, bytes, IBV_ACCESS_REMOTE_WRITE) == nullptr ||
                    (peer.access & IBV_ACCESS_REMOTE_WRITE) == 0)) {
    return IBV_WC_REM_ACCESS_ERR;
  }
  const bool withImm = send.wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (withImm && peer.receives.empty()) return peer.qp.state == IBV_QPS_ERR ? IBV_WC_RETRY_EXC_ERR : kBlocked;
  uint64_t offset = 0;
  for (const ibv_sge& sge : send.sges) {
    std::memcpy(reinterpret_cast<void*>(remote + offset), reinterpret_cast<const void*>(sge.addr), sge.length);
    offset += sge.length;
  }
  if (bytes > 0) ++s.writesExecuted;
  if (withImm) {
    CqEntry entry;
    entry.wc.wr_id = peer.receives.front();
    entry.wc.status = IBV_WC_SUCCESS;
    entry.wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    entry.wc.byte_len = uint32_t(bytes);
    entry.wc.imm_data = send.wr.imm_data;
    entry.wc.wc_flags = IBV_WC_WITH_IMM;
    entry.wc.qp_num = peer.qp.qp_num;
    entry.wc.src_qp = qp.qp.qp_num;
    peer.receives.pop_front();
    push(cqOf(s, peer.qp.recv_cq), entry);
  }
  return IBV_WC_SUCCESS;
}

int performAtomicAdd(State& s, FakeQp& qp, FakeQp& peer, const PendingSend& send) {
  if (send.sges.size() != 1 || send.sges[0].length != 8) return IBV_WC_LOC_LEN_ERR;
  if (!localSgesValid(s, qp, send, IBV_ACCESS_LOCAL_WRITE)) return IBV_WC_LOC_PROT_ERR;
  const uint64_t remote = send.wr.wr.atomic.remote_addr;
  if (!s.settings.atomics || remote % 8 != 0 || qp.maxRdAtomic == 0 || peer.maxDestRdAtomic == 0) {
    return IBV_WC_REM_INV_REQ_ERR;
  }
  if (regionFor(s, send.wr.wr.atomic.rkey, peer.qp.pd, remote, 8, IBV_ACCESS_REMOTE_ATOMIC) == nullptr ||
      (peer.access & IBV_ACCESS_REMOTE_ATOMIC) == 0) {
    return IBV_WC_REM_ACCESS_ERR;
  }
  const uint64_t old = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(remote))
                           .fetch_add(send.wr.wr.atomic.compare_add, std::memory_order_acq_rel);
  std::memcpy(reinterpret_cast<void*>(send.sges[0].addr), &old, sizeof(old));
  return IBV_WC_SUCCESS;
}

// Executes one send; kBlocked when it has to wait for the peer's receive.
int perform(State& s, FakeQp& qp, const PendingSend& send) {
  auto found = s.qpByNumber.find(qp.remoteQpn);
  // No answer from a peer that is gone, not ready, or expects other sequence numbers: the transport
  // retries run out.
  if (found == s.qpByNumber.end()) return IBV_WC_RETRY_EXC_ERR;
  FakeQp& peer = *found->second;
  if ((peer.qp.state != IBV_QPS_RTR && peer.qp.state != IBV_QPS_RTS) || peer.remoteQpn != qp.qp.qp_num ||
      peer.rqPsn != qp.sqPsn) {
    return IBV_WC_RETRY_EXC_ERR;
  }
  switch (send.wr.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return performWrite(s, qp, peer, send);
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return performAtomicAdd(s, qp, peer, send);
    default:
      return IBV_WC_LOC_QP_OP_ERR;
  }
}

void progress(State& s, FakeQp& qp) {
  while (!qp.pending.empty() && !s.settings.stalled) {
    const PendingSend& send = qp.pending.front();
    int status = IBV_WC_WR_FLUSH_ERR;
    if (qp.qp.state != IBV_QPS_ERR) {
      if (s.settings.failSend) {
        status = *s.settings.failSend;
        s.settings.failSend.reset();
      } else {
        status = perform(s, qp, send);
      }
    }
    if (status == kBlocked) {
      if (qp.rnrRetry < 7) status = IBV_WC_RNR_RETRY_EXC_ERR;
      if (status == kBlocked) return;
    }
    completeSend(s, qp, send, ibv_wc_status(status));
    qp.pending.pop_front();
  }
}

void progressAll(State& s) {
  for (auto& [pointer, qp] : s.qps) progress(s, *qp);
}

ibv_device** getDeviceList(int* count) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  ++s.deviceLists;
  if (count != nullptr) *count = 1;
  return new ibv_device* [2] { &s.device, nullptr };
}

void freeDeviceList(ibv_device** list) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  --s.deviceLists;
  delete[] list;
}

const char* getDeviceName(ibv_device* device) { return device->name; }

ibv_context* openDevice(ibv_device* device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto context = std::make_unique<ibv_context>();
  context->device = device;
  ibv_context* raw = context.get();
  s.contexts.emplace(raw, std::move(context));
  return raw;
}

int closeDevice(ibv_context* context) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  for (auto& [pointer, pd] : s.pds) {
    if (pd->context == context) return fail(EBUSY);
  }
  return s.contexts.erase(context) == 1 ? 0 : fail(EINVAL);
}

int queryDevice(ibv_context*, ibv_device_attr* attr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  *attr = ibv_device_attr{};
  std::strncpy(attr->fw_ver, "fake", sizeof(attr->fw_ver) - 1);
  attr->max_mr_size = UINT64_MAX;
  attr->max_qp = 1 << 16;
  attr->max_qp_wr = kMaxQpWr;
  attr->max_sge = kMaxSge;
  attr->max_cq = 1 << 16;
  attr->max_cqe = kMaxCqe;
  attr->max_mr = 1 << 20;
  attr->max_pd = 1 << 16;
  attr->max_qp_rd_atom = 16;
  attr->max_qp_init_rd_atom = 16;
  attr->atomic_cap = s.settings.atomics ? IBV_ATOMIC_HCA : IBV_ATOMIC_NONE;
  attr->phys_port_cnt = 1;
  return 0;
}

int queryPort(ibv_context*, uint8_t port, ibv_port_attr* attr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (port != 1) return fail(EINVAL);
  *attr = ibv_port_attr{};
  attr->state = s.settings.portState;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = s.settings.ethernet ? IBV_MTU_1024 : IBV_MTU_4096;
  attr->gid_tbl_len = kGidTableLength;
  attr->max_msg_sz = s.settings.maxMessageBytes;
  attr->lid = s.settings.ethernet ? 0 : kLid;
  attr->link_layer = s.settings.ethernet ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  return 0;
}

int queryGid(ibv_context*, uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index < 0 || index >= kGidTableLength) return fail(EINVAL);
  *gid = gidAt(index);
  return 0;
}

ibv_pd* allocPd(ibv_context* context) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.contexts.count(context) == 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto pd = std::make_unique<ibv_pd>();
  pd->context = context;
  ibv_pd* raw = pd.get();
  s.pds.emplace(raw, std::move(pd));
  return raw;
}

int deallocPd(ibv_pd* pd) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  for (auto& [pointer, mr] : s.mrs) {
    if (mr->mr.pd == pd) return fail(EBUSY);
  }
  for (auto& [pointer, qp] : s.qps) {
    if (qp->qp.pd == pd) return fail(EBUSY);
  }
  return s.pds.erase(pd) == 1 ? 0 : fail(EINVAL);
}

ibv_mr* regMr(ibv_pd* pd, void* address, size_t bytes, int access) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.settings.failRegMr != 0) {
    errno = std::exchange(s.settings.failRegMr, 0);
    return nullptr;
  }
  // Remote write and atomic access need local write, as on hardware.
  const bool remoteNeedsLocal = (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0;
  if (s.pds.count(pd) == 0 || address == nullptr || (remoteNeedsLocal && !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return nullptr;
  }
  auto mr = std::make_unique<FakeMr>();
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = address;
  mr->mr.length = bytes;
  mr->mr.lkey = mr->mr.rkey = s.nextKey;
  s.nextKey += 0x100;
  mr->access = access;
  ibv_mr* raw = &mr->mr;
  s.mrByKey[raw->lkey] = mr.get();
  s.mrs.emplace(raw, std::move(mr));
  return raw;
}

int deregMr(ibv_mr* mr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.mrs.count(mr) == 0) return fail(EINVAL);
  s.mrByKey.erase(mr->lkey);
  s.mrs.erase(mr);
  return 0;
}

ibv_cq* createCq(ibv_context* context, int entries, void*, ibv_comp_channel*, int) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.contexts.count(context) == 0 || entries < 1 || entries > kMaxCqe) {
    errno = EINVAL;
    return nullptr;
  }
  auto cq = std::make_unique<FakeCq>();
  cq->cq.context = context;
  cq->cq.cqe = entries;
  ibv_cq* raw = &cq->cq;
  s.cqs.emplace(raw, std::move(cq));
  return raw;
}

int destroyCq(ibv_cq* cq) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  for (auto& [pointer, qp] : s.qps) {
    if (qp->qp.send_cq == cq || qp->qp.recv_cq == cq) return fail(EBUSY);
  }
  return s.cqs.erase(cq) == 1 ? 0 : fail(EINVAL);
}

ibv_qp* createQp(ibv_pd* pd, ibv_qp_init_attr* init) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const ibv_qp_cap& cap = init->cap;
  if (s.pds.count(pd) == 0 || init->qp_type != IBV_QPT_RC || s.cqs.count(init->send_cq) == 0 ||
      s.cqs.count(init->recv_cq) == 0 || init->srq != nullptr || cap.max_send_wr > kMaxQpWr ||
      cap.max_recv_wr > kMaxQpWr || cap.max_send_sge > kMaxSge || cap.max_recv_sge > kMaxSge) {
    errno = EINVAL;
    return nullptr;
  }
  auto qp = std::make_unique<FakeQp>();
  qp->qp.context = pd->context;
  qp->qp.pd = pd;
  qp->qp.send_cq = init->send_cq;
  qp->qp.recv_cq = init->recv_cq;
  qp->qp.qp_num = s.nextQpn++;
  qp->qp.qp_type = IBV_QPT_RC;
  qp->qp.state = IBV_QPS_RESET;
  qp->maxSend = cap.max_send_wr;
  qp->maxRecv = cap.max_recv_wr;
  ibv_qp* raw = &qp->qp;
  s.qpByNumber[raw->qp_num] = qp.get();
  s.qps.emplace(raw, std::move(qp));
  return raw;
}

int destroyQp(ibv_qp* qp) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.qps.count(qp) == 0) return fail(EINVAL);
  s.qpByNumber.erase(qp->qp_num);
  s.qps.erase(qp);
  return 0;
}

bool has(int mask, int bits) { return (mask & bits) == bits; }

int toInit(FakeQp& qp, const ibv_qp_attr& attr, int mask) {
  if (qp.qp.state != IBV_QPS_RESET && qp.qp.state != IBV_QPS_INIT) return EINVAL;
  if (!has(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return EINVAL;
  if (attr.port_num != 1 || attr.pkey_index != 0) return EINVAL;
  qp.access = int(attr.qp_access_flags);
  return 0;
}

int toRtr(State& s, FakeQp& qp, const ibv_qp_attr& attr, int mask) {
  constexpr int kNeeded = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  if (qp.qp.state != IBV_QPS_INIT || !has(mask, kNeeded)) return EINVAL;
  const ibv_ah_attr& ah = attr.ah_attr;
  if (ah.port_num != 1 || attr.rq_psn > 0xffffff) return EINVAL;
  if (attr.path_mtu > (s.settings.ethernet ? IBV_MTU_1024 : IBV_MTU_4096)) return EINVAL;
  // RoCE has no LIDs: the address must be a GID of the fabric. InfiniBand may use either.
  if (ah.is_global) {
    bool known = false;
    for (int i = 0; i < kGidTableLength; ++i) {
      known = known || std::memcmp(ah.grh.dgid.raw, gidAt(i).raw, sizeof(ibv_gid)) == 0;
    }
    if (!known || ah.grh.sgid_index >= kGidTableLength) return EINVAL;
  } else if (s.settings.ethernet || ah.dlid != kLid) {
    return EINVAL;
  }
  qp.remoteQpn = attr.dest_qp_num;
  qp.rqPsn = attr.rq_psn;
  qp.maxDestRdAtomic = attr.max_dest_rd_atomic;
  return 0;
}

int toRts(FakeQp& qp, const ibv_qp_attr& attr, int mask) {
  constexpr int kNeeded =
      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  if (qp.qp.state != IBV_QPS_RTR || !has(mask, kNeeded)) return EINVAL;
  if (attr.sq_psn > 0xffffff || attr.timeout > 31 || attr.retry_cnt > 7 || attr.rnr_retry > 7) return EINVAL;
  qp.sqPsn = attr.sq_psn;
  qp.rnrRetry = attr.rnr_retry;
  qp.maxRdAtomic = attr.max_rd_atomic;
  return 0;
}

int modifyQp(ibv_qp* raw, ibv_qp_attr* attr, int mask) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto found = s.qps.find(raw);
  if (found == s.qps.end() || !(mask & IBV_QP_STATE)) return fail(EINVAL);
  FakeQp& qp = *found->second;
  int result = EINVAL;
  switch (attr->qp_state) {
    case IBV_QPS_INIT:
      result = toInit(qp, *attr, mask);
      break;
    case IBV_QPS_RTR:
      result = toRtr(s, qp, *attr, mask);
      break;
    case IBV_QPS_RTS:
      result = toRts(qp, *attr, mask);
      break;
    case IBV_QPS_ERR:
      flushReceives(s, qp);
      result = 0;
      break;
    default:
      break;
  }
  if (result != 0) return fail(result);
  qp.qp.state = attr->qp_state;
  return 0;
}

int postSend(ibv_qp* raw, ibv_send_wr* wr, ibv_send_wr** bad) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  FakeQp& qp = *s.qps.at(raw);
  if (qp.qp.state != IBV_QPS_RTS && qp.qp.state != IBV_QPS_ERR) {
    *bad = wr;
    return fail(EINVAL);
  }
  for (ibv_send_wr* next = wr; next != nullptr; next = next->next) {
    // An entry is free once a completion of it or of a later request has been polled.
    if (qp.sendPosted - qp.sendFreed >= qp.maxSend || next->num_sge < 0 || next->num_sge > kMaxSge) {
      *bad = next;
      return fail(next->num_sge > kMaxSge ? EINVAL : ENOMEM);
    }
    PendingSend send;
    send.wr = *next;
    send.wr.next = nullptr;
    send.sges.assign(next->sg_list, next->sg_list + next->num_sge);
    send.index = qp.sendPosted++;
    qp.pending.push_back(std::move(send));
  }
  progress(s, qp);
  return 0;
}

int postRecv(ibv_qp* raw, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  FakeQp& qp = *s.qps.at(raw);
  if (qp.qp.state == IBV_QPS_RESET) {
    *bad = wr;
    return fail(EINVAL);
  }
  for (ibv_recv_wr* next = wr; next != nullptr; next = next->next) {
    if (qp.receives.size() >= qp.maxRecv) {
      *bad = next;
      return fail(ENOMEM);
    }
    qp.receives.push_back(next->wr_id);
  }
  if (qp.qp.state == IBV_QPS_ERR) flushReceives(s, qp);
  progressAll(s);  // a sender may be waiting for these receives
  return 0;
}

int pollCq(ibv_cq* raw, int entries, ibv_wc* completions) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  progressAll(s);
  FakeCq& cq = cqOf(s, raw);
  if (cq.overrun) {
    errno = EOVERFLOW;
    return -1;
  }
  int count = 0;
  for (; count < entries && !cq.entries.empty(); ++count) {
    const CqEntry entry = cq.entries.front();
    cq.entries.pop_front();
    completions[count] = entry.wc;
    auto qp = s.qpByNumber.find(entry.wc.qp_num);
    if (entry.send && qp != s.qpByNumber.end()) {
      qp->second->sendFreed = std::max(qp->second->sendFreed, entry.sendIndex + 1);
    }
  }
  return count;
}

IbverbsApi makeApi() {
  IbverbsApi api;
  api.loaded = true;
  api.getDeviceList = getDeviceList;
  api.freeDeviceList = freeDeviceList;
  api.getDeviceName = getDeviceName;
  api.openDevice = openDevice;
  api.closeDevice = closeDevice;
  api.queryDevice = queryDevice;
  api.queryPort = queryPort;
  api.queryGid = queryGid;
  api.allocPd = allocPd;
  api.deallocPd = deallocPd;
  api.regMr = regMr;
  api.deregMr = deregMr;
  api.createCq = createCq;
  api.destroyCq = destroyCq;
  api.createQp = createQp;
  api.destroyQp = destroyQp;
  api.modifyQp = modifyQp;
  api.postSend = postSend;
  api.postRecv = postRecv;
  api.pollCq = pollCq;
  // wcStatusStr stays unset: the transport's own status texts are used.
  return api;
}

template <typename Fn>
void withState(Fn fn) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  fn(s);
}

}  // namespace

const IbverbsApi& FakeIbverbs::api() {
  static const IbverbsApi api = makeApi();
  return api;
}

void FakeIbverbs::reset() {
  withState([](State& s) {
    s.settings = Settings{};
    s.writesExecuted = 0;
  });
}

FakeIbverbsCounts FakeIbverbs::live() {
  FakeIbverbsCounts counts;
  withState([&](State& s) {
    counts = {s.deviceLists, s.contexts.size(), s.pds.size(), s.mrs.size(), s.cqs.size(), s.qps.size()};
  });
  return counts;
}

uint64_t FakeIbverbs::writesExecuted() {
  uint64_t count = 0;
  withState([&](State& s) { count = s.writesExecuted; });
  return count;
}

void FakeIbverbs::setMaxMessageBytes(uint32_t bytes) {
  withState([&](State& s) { s.settings.maxMessageBytes = bytes; });
}
void FakeIbverbs::setPortState(ibv_port_state portState) {
  withState([&](State& s) { s.settings.portState = portState; });
}
void FakeIbverbs::setEthernet(bool ethernet) {
  withState([&](State& s) { s.settings.ethernet = ethernet; });
}
void FakeIbverbs::setAtomics(bool supported) {
  withState([&](State& s) { s.settings.atomics = supported; });
}
void FakeIbverbs::failNextRegMr(int error) {
  withState([&](State& s) { s.settings.failRegMr = error; });
}
void FakeIbverbs::failNextSend(ibv_wc_status status) {
  withState([&](State& s) { s.settings.failSend = status; });
}
void FakeIbverbs::stallSends(bool stalled) {
  withState([&](State& s) { s.settings.stalled = stalled; });
}

ScopedFakeIbverbs::ScopedFakeIbverbs() {
  FakeIbverbs::reset();
  setIbverbsApiForTesting(&FakeIbverbs::api());
}

ScopedFakeIbverbs::~ScopedFakeIbverbs() {
  setIbverbsApiForTesting(nullptr);
  FakeIbverbs::reset();
}

}  // namespace loom::testing
