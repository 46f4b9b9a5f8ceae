#include "group.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "log.hpp"
#include "result.hpp"

namespace loom::nccl {
namespace {

struct Held {
  ncclComm* comm;
  PendingCall call;
  Decision decision;
};

struct GroupState {
  int depth = 0;
  const RealNccl* real = nullptr;  // whose group this one mirrors (set at the outermost start)
  std::vector<ncclComm*> inits;
  std::vector<Held> calls;
};

thread_local GroupState group;

// The calls Loom runs, per communicator in the order they were made (the same on every rank). Calls
// of several communicators (ranks driven by this one thread) run side by side on each communicator's
// kept thread (comm_worker.hpp): a Loom call may wait for its peers at setup, and the peers are the
// other communicators here.
// Calls held for the JIT that must go to NCCL after all (forwardAfter) are forwarded in a real group of
// their own, as they would have been inside the user's.
ncclResult_t runHeld(const std::vector<Held>& calls, const RealNccl* real) {
  std::vector<ncclComm*> comms;
  for (const Held& held : calls) {
    if (std::find(comms.begin(), comms.end(), held.comm) == comms.end()) comms.push_back(held.comm);
  }
  std::vector<ncclResult_t> results(comms.size(), ncclSuccess);
  std::vector<std::vector<const PendingCall*>> forwardAfter(comms.size());
  auto runComm = [&](size_t index) {
    ncclComm* comm = comms[index];
    // Collectives in call order, then the sends and receives together (point_to_point.hpp): every rank
    // reaches the same steps in the same order, whatever order its group named them in.
    std::vector<std::pair<const PendingCall*, Decision>> pointToPoint;
    for (const Held& held : calls) {
      if (held.comm != comm) continue;
      if (held.call.info.call == Call::kSend || held.call.info.call == Call::kRecv) {
        pointToPoint.emplace_back(&held.call, held.decision);
        continue;
      }
      const ncclResult_t result = guarded("ncclGroupEnd", comm, [&] {
        if (!held.decision.jitAtGroupEnd) {
          runOnLoom(*comm, held.call, held.decision);
        } else if (!runDeferredJit(*comm, held.call, held.decision)) {
          forwardAfter[index].push_back(&held.call);
        }
        return ncclSuccess;
      });
      if (results[index] == ncclSuccess) results[index] = result;
    }
    if (pointToPoint.empty()) return;
    const ncclResult_t result = guarded("ncclGroupEnd", comm, [&] {
      for (const PendingCall* call : runPointToPointOnLoom(*comm, pointToPoint)) forwardAfter[index].push_back(call);
      return ncclSuccess;
    });
    if (results[index] == ncclSuccess) results[index] = result;
  };
  if (comms.size() == 1) {
    runComm(0);
  } else {
    for (size_t i = 0; i < comms.size(); ++i) {
      if (!comms[i]->worker) comms[i]->worker = std::make_unique<CommWorker>();
      comms[i]->worker->start([&runComm, i] { runComm(i); });
    }
    for (ncclComm* comm : comms) comm->worker->finish();  // runComm keeps failures in `results`
  }
  const bool anyForward =
      std::any_of(forwardAfter.begin(), forwardAfter.end(), [](const auto& held) { return !held.empty(); });
  if (anyForward && real == nullptr) {
    recordError(nullptr, "ncclGroupEnd: calls with no Loom plan have no real NCCL to go to");
    return ncclInvalidUsage;
  }
  if (anyForward) {
    if (const ncclResult_t started = real->ncclGroupStart(); started != ncclSuccess) return started;
    for (size_t i = 0; i < comms.size(); ++i) {
      for (const PendingCall* call : forwardAfter[i]) {
        const ncclResult_t result = guarded("ncclGroupEnd", comms[i], [&] {
          forward(*comms[i], *call);
          return ncclSuccess;
        });
        if (results[i] == ncclSuccess) results[i] = result;
      }
    }
    const ncclResult_t ended = real->ncclGroupEnd();
    if (ended != ncclSuccess && ended != ncclInProgress) return ended;
  }
  for (ncclResult_t result : results) {
    if (result != ncclSuccess) return result;
  }
  return ncclSuccess;
}

}  // namespace

bool inGroup() { return group.depth > 0; }

ncclResult_t groupStart() {
  if (group.depth == 0) group.real = realNccl();
  if (group.real != nullptr) {
    const ncclResult_t result = group.real->ncclGroupStart();
    if (result != ncclSuccess) {
      recordError(nullptr,
                  std::string("ncclGroupStart: the real NCCL's failed: ") + group.real->ncclGetErrorString(result));
      return result;
    }
  }
  ++group.depth;
  return ncclSuccess;
}

ncclResult_t groupEnd() {
  if (group.depth == 0) throw Failure(ncclInvalidUsage, "no group is open (ncclGroupEnd without ncclGroupStart)");
  --group.depth;
  const RealNccl* real = group.real;
  if (group.depth > 0) return real != nullptr ? real->ncclGroupEnd() : ncclSuccess;
  std::vector<ncclComm*> inits = std::move(group.inits);
  std::vector<Held> calls = std::move(group.calls);
  group.inits.clear();
  group.calls.clear();

  if (!inits.empty()) connectBegin(inits, real != nullptr);
  ncclResult_t realResult = ncclSuccess;
  if (real != nullptr) realResult = real->ncclGroupEnd();
  if (!inits.empty()) {
    connectFinish(inits);
    // A rank of a split that joined no communicator (NCCL_SPLIT_NOCOLOR) was handed null: its object goes.
    for (ncclComm* comm : inits) {
      if (!comm->bootstrap) delete comm;
    }
  }
  if (realResult != ncclSuccess && realResult != ncclInProgress) {
    throw Failure(realResult, std::string("the real NCCL's ncclGroupEnd failed: ") +
                                  real->ncclGetErrorString(realResult) + ": " + real->ncclGetLastError(nullptr));
  }
  return runHeld(calls, real);
}

ncclResult_t groupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (group.depth == 0)
    throw Failure(ncclInvalidUsage, "no group is open (ncclGroupSimulateEnd without ncclGroupStart)");
  if (!group.inits.empty() && group.depth == 1) {
    throw Failure(ncclInvalidUsage, "ncclGroupSimulateEnd: the group creates communicators, which cannot be simulated");
  }
  const RealNccl* real = group.real;
  if (real != nullptr && real->ncclGroupSimulateEnd == nullptr) {
    throw Failure(ncclInvalidUsage, "the real NCCL (" + real->path + ") has no ncclGroupSimulateEnd");
  }
  --group.depth;
  if (group.depth == 0) {
    // Simulated, so not run: NCCL does not run them either.
    group.calls.clear();
  }
  return real != nullptr ? real->ncclGroupSimulateEnd(simInfo) : ncclSuccess;
}

void holdInit(ncclComm* comm) { group.inits.push_back(comm); }

void holdCall(ncclComm* comm, const PendingCall& call, const Decision& decision) {
  group.calls.push_back(Held{comm, call, decision});
}

}  // namespace loom::nccl
