#pragma once

// An in-process emulation of libibverbs, good enough to run the InfiniBand transport with ranks as
// threads of one process: one device "fake_ib0" with one port, protection domains, memory regions
// (an address range with keys and access flags), completion queues, and reliable-connected queue
// pairs whose state machine is checked like hardware checks it (posting needs RTS, RTR needs the
// peer's queue pair number and PSN, and so on). Work requests execute inside ibv_post_send, against
// the peer's memory regions, and report through completion queues:
//   RDMA write            copy into the peer's region after checking rkey, range and access; a bad
//                         key or range completes with IBV_WC_REM_ACCESS_ERR at the sender
//   write with immediate  the same, then consumes a posted receive of the peer and completes it
//                         with the immediate data; with no receive posted it waits (rnr_retry 7)
//                         or fails with IBV_WC_RNR_RETRY_EXC_ERR
//   atomic fetch-and-add  an atomic add on the peer's 8-byte word, the old value into the local sge
// A failed request moves the queue pair to the error state and flushes everything after it, and
// send queue entries are only freed when a later signalled completion is polled, as on hardware.

#include <cstdint>

#include "ibverbs_api.hpp"

namespace loom::testing {

struct FakeIbverbsCounts {
  size_t deviceLists = 0;
  size_t contexts = 0;
  size_t pds = 0;
  size_t mrs = 0;
  size_t cqs = 0;
  size_t qps = 0;
  bool operator==(const FakeIbverbsCounts&) const = default;
};

class FakeIbverbs {
 public:
  static const IbverbsApi& api();

  // Default settings and no pending failures; objects that are still open stay open.
  static void reset();
  static FakeIbverbsCounts live();
  // RDMA writes (with or without immediate) of at least one byte executed since reset().
  static uint64_t writesExecuted();

  // Port settings, seen by contexts opened afterwards.
  static void setMaxMessageBytes(uint32_t bytes);
  static void setPortState(ibv_port_state state);
  static void setEthernet(bool ethernet);  // RoCE: no LID, peers must be addressed by GID
  static void setAtomics(bool supported);

  // Failure injection.
  static void failNextRegMr(int error);            // the next ibv_reg_mr returns NULL with errno
  static void failNextSend(ibv_wc_status status);  // the next send request to execute completes so
  // While stalled, posted sends neither execute nor complete (a link that does not answer).
  static void stallSends(bool stalled);
};

// Installs the fake as the table openIbContext uses, for the lifetime of the object.
class ScopedFakeIbverbs {
 public:
  ScopedFakeIbverbs();
  ~ScopedFakeIbverbs();
  ScopedFakeIbverbs(const ScopedFakeIbverbs&) = delete;
  ScopedFakeIbverbs& operator=(const ScopedFakeIbverbs&) = delete;
};

}  // namespace loom::testing
