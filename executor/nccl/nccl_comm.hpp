#pragma once

// The communicator the NCCL API hands out (ncclComm_t points at one): Loom's side (bootstrap,
// communicator, executor) and the real NCCL's communicator, both made from one ncclUniqueId, and
// how each call on it is run (dispatch.hpp decides; this file carries the decision out).

#include <nccl.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "comm_worker.hpp"
#include "coverage.hpp"
#include "dispatch.hpp"
#include "jit_plans.hpp"
#include "loom/bootstrap.hpp"
#include "loom/communicator.hpp"
#include "loom/executor.hpp"
#include "loom/unique_id.hpp"
#include "real_nccl.hpp"
#include "settings.hpp"

// A communicator being made from another by ncclCommSplit or ncclCommShrink, until it is connected.
struct ncclCommSplitSpec {
  ncclComm* parent = nullptr;
  int color = 0;  // ncclCommSplit; NCCL_SPLIT_NOCOLOR: this rank joins no communicator
  int key = 0;
  std::optional<std::vector<int>> excluded;  // ncclCommShrink: the parent's ranks left out
  int shrinkFlags = 0;
  ncclComm** out = nullptr;  // the caller's handle, set to null when this rank joins none
  const char* function() const { return excluded ? "ncclCommShrink" : "ncclCommSplit"; }
};

struct ncclComm {
  // First, so that a communicator of the real NCCL (whose own calls of its API reach this library when
  // the program linked it before LD_PRELOAD put this one in front) is told apart: see foreignComm.
  static constexpr uint64_t kMagic = 0x4d4d4f434d4f4f4cull;  // "LOOMCOMM"
  uint64_t magic = kMagic;
  ~ncclComm() { magic = 0; }
  // Which communicator of the process this is (1, 2, ... in creation order) and how it was made, for
  // the log and the coverage report: the function that made it ("ncclCommInitRank", "ncclCommInitAll",
  // ...: initRank in nccl_api.cc sets it) or "ncclCommSplit of comm 1 (color 0, key 2)" (connectFinish).
  uint32_t serial = 0;
  std::string origin = "ncclCommInitRank";
  int rank = 0;
  int worldSize = 0;
  int cudaDevice = -1;  // -1 on the CPU backend
  uint32_t ranksPerNode = 1;
  loom::nccl::Settings settings;

  std::optional<loom::UniqueId> id;        // made by ncclCommInitRank and its kin
  std::optional<ncclCommSplitSpec> split;  // made by ncclCommSplit/ncclCommShrink, until connected
  std::vector<int> parentRanks;            // a split's members: their ranks in the parent
  std::optional<ncclConfig_t> config;      // as the caller gave it
  std::shared_ptr<loom::Bootstrap> bootstrap;
  std::shared_ptr<loom::Communicator> communicator;  // null when Loom's side is off
  std::unique_ptr<loom::Executor> executor;
  std::string loomMissing;  // why Loom's side is off

  const loom::nccl::RealNccl* real = nullptr;  // the real library (null: none)
  // The real NCCL's own communicator: a handle of the other library, never dereferenced here.
  ncclComm_t realComm = nullptr;
  std::optional<ncclUniqueId> realId;  // rank 0's id for it, shared over the bootstrap
  std::string realMissing;             // why there is no realComm
  bool realTried = false;              // this rank asked the real NCCL for realComm (every rank does, or none)

  bool ready = false;  // a grouped init is ready at ncclGroupEnd
  std::atomic<ncclResult_t> asyncError{ncclSuccess};
  std::mutex errorMutex;
  char lastError[1024] = "";
  std::unordered_set<uint64_t> logged;  // what the log said once already (dispatch.cc's key)
  // The plans compiled on first use for this communicator, and what could not be had (jit_plans.hpp).
  loom::nccl::JitPlans jit;
  // Its calls by who ran them and why (made when it is ready).
  std::shared_ptr<loom::nccl::CommunicatorCoverage> coverage;
  // Runs this communicator's calls when a group holds calls of several communicators of this process.
  std::unique_ptr<loom::nccl::CommWorker> worker;
  // Send/recv on more than two ranks: per peer, a communicator of the two (Loom's side only), made by their
  // first message (point_to_point.hpp); on a GPU each runs on a stream of its own.
  std::map<int, std::unique_ptr<ncclComm>> links;
  cudaStream_t linkStream = nullptr;  // a link's own stream (links only, GPU only)
  cudaEvent_t orderEvent = nullptr;   // orders the streams of its send/recv rounds (point_to_point.cc)
  // The bytes to send of in-place exchanges (a send and a receive over one buffer, point_to_point.cc), whose
  // plans run out of place. A grown scratch keeps the smaller ones until the communicator goes: a captured
  // graph may still name them.
  std::vector<void*> exchangeScratch;  // device allocations, the last the largest
  uint64_t exchangeScratchBytes = 0;
  std::vector<uint8_t> hostExchangeScratch;  // the CPU backend's

  loom::nccl::Capabilities capabilities() const { return {executor != nullptr, realComm != nullptr}; }
};

namespace loom::nccl {

// One collective or point-to-point call, with the buffers and stream it names.
struct PendingCall {
  CallInfo info;
  const void* send = nullptr;
  void* recv = nullptr;
  int peer = -1;
  cudaStream_t stream = nullptr;
};

// A communicator with its arguments checked, not connected yet.
std::unique_ptr<ncclComm> newComm(int worldSize, int rank, const ncclUniqueId& id, const ncclConfig_t* config);
// A communicator to be made from `parent` (split or shrink), not connected yet; connectBegin/Finish
// connect it like one from an id, over a bootstrap of its members only.
std::unique_ptr<ncclComm> newSplitComm(ncclComm& parent, const ncclCommSplitSpec& spec, const ncclConfig_t* config);
// Connects the communicators (several: ranks of this thread, grouped), Loom's side and the real
// NCCL's: Begin creates both (the real one inside an open real group when `realGroupOpen`, which
// the caller closes before Finish), Finish makes the ranks agree on forwarding and marks them ready.
void connectBegin(const std::vector<ncclComm*>& comms, bool realGroupOpen);
void connectFinish(const std::vector<ncclComm*>& comms);
// Destroys (abort: without the real NCCL's finalisation) both sides.
void destroy(ncclComm* comm, bool abort);

// Decides and carries out one call; a Loom call inside a group is held for ncclGroupEnd.
ncclResult_t run(ncclComm* comm, PendingCall call);
// Runs a call that dispatch sent to Loom (at once, or from ncclGroupEnd).
void runOnLoom(ncclComm& comm, const PendingCall& call, const Decision& decision);
// At ncclGroupEnd, a grouped call held for the JIT (Decision::jitAtGroupEnd): compiles its plan (collective
// over the communicator) and runs it on Loom; false when it must go to NCCL (no algorithm, or the compile
// failed: logged and counted with that reason), which the caller forwards. Throws when nothing can run it.
bool runDeferredJit(ncclComm& comm, const PendingCall& call, Decision decision);
// runDeferredJit's first half: compiles the plan of a call held for the JIT into `decision` (logged and counted);
// true when it runs on Loom, false when it goes to NCCL. Throws when nothing can run it.
bool resolveDeferredJit(ncclComm& comm, const PendingCall& call, Decision& decision);
// One communicator's send/recv calls of a group on Loom, on its device (point_to_point.hpp); returns those
// that go to NCCL after all.
std::vector<const PendingCall*> runPointToPointOnLoom(
    ncclComm& comm, const std::vector<std::pair<const PendingCall*, Decision>>& calls);
// The log line of a call's outcome and its count in the communicator's coverage summary.
void noteCall(ncclComm& comm, const CallInfo& info, const Decision& decision);
// Counts kernels Loom launched for `comm`'s calls in its coverage summary.
void countLaunches(ncclComm& comm, uint64_t launches);
// Hands a call to the real NCCL.
void forward(ncclComm& comm, const PendingCall& call);
// Throws Failure when the real NCCL returned an error, with its text.
void checkReal(const ncclComm& comm, ncclResult_t result, const char* function);

// Copies on the call's stream (CPU backend: at once).
void localCopy(const ncclComm& comm, void* dst, const void* src, uint64_t bytes, cudaStream_t stream);

}  // namespace loom::nccl
