#include "nccl_comm.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>

#include "default_plans.hpp"
#include "goodbye_at_exit.hpp"
#include "group.hpp"
#include "jit_plans.hpp"
#include "log.hpp"
#include "loom/bootstrap_split.hpp"
#include "loom/cache_dir.hpp"
#include "loom/error.hpp"
#include "loom/gpu_buffer.hpp"
#include "loom/plan_registry.hpp"
#include "loom/rank_list.hpp"
#include "loom/transport.hpp"
#include "point_to_point.hpp"
#include "result.hpp"
#include "unique_id_format.hpp"

namespace loom::nccl {
namespace {

void checkCuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw Error(ErrorCategory::kCuda, what + ": " + cudaGetErrorString(status));
}

// Runs `step` for every communicator: on this thread for one, else one thread each (each blocks
// until its peers, which may be the other threads, arrive).
void forEach(const std::vector<ncclComm*>& comms, const std::function<void(ncclComm&)>& step) {
  if (comms.size() == 1) {
    step(*comms[0]);
    return;
  }
  std::vector<std::exception_ptr> failures(comms.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < comms.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        step(*comms[i]);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

// A split's members meet over the parent's bootstrap and get one of their own (none for a rank that
// joins no communicator: NCCL_SPLIT_NOCOLOR).
void joinSubgroup(ncclComm& comm) {
  const ncclCommSplitSpec& spec = *comm.split;
  Bootstrap& parent = *spec.parent->bootstrap;
  SubgroupBootstrap subgroup;
  if (spec.excluded) {
    std::vector<int> members;
    for (int rank = 0; rank < parent.worldSize(); ++rank) {
      if (std::find(spec.excluded->begin(), spec.excluded->end(), rank) == spec.excluded->end())
        members.push_back(rank);
    }
    subgroup = subgroupBootstrap(parent, members);
  } else {
    subgroup = splitBootstrap(parent, spec.color, spec.key);
  }
  if (!subgroup.bootstrap) return;
  comm.bootstrap = subgroup.bootstrap;
  comm.rank = comm.bootstrap->rank();
  comm.worldSize = comm.bootstrap->worldSize();
  comm.parentRanks = std::move(subgroup.parentRanks);
}

// Loom's side, and the real NCCL's id from rank 0: every rank must have the real library, or
// nobody forwards (a forwarded call would wait for ranks that cannot take part). A split's real side
// is the parent's real communicator split alike (connectRealSide).
void connectLoomSide(ncclComm& comm) {
  if (!comm.settings.cpuBackend)
    checkCuda(cudaSetDevice(comm.cudaDevice), "cudaSetDevice(" + std::to_string(comm.cudaDevice) + ")");
  if (comm.split) {
    const ncclComm& parent = *comm.split->parent;
    comm.real = parent.real;
    if (parent.realComm == nullptr) comm.realMissing = parent.realMissing;
    joinSubgroup(comm);
    if (!comm.bootstrap) return;
  } else {
    comm.bootstrap = std::make_shared<Bootstrap>(comm.rank, comm.worldSize, *comm.id);
  }
  if (comm.settings.forceNccl) {
    comm.loomMissing = "LOOM_NCCL_FORCE_NCCL is set";
  } else {
    comm.communicator =
        std::make_shared<Communicator>(comm.bootstrap, IbConfig::fromEnvironment(),
                                       comm.settings.cpuBackend ? Communicator::kHostOnly : comm.cudaDevice);
    installDefaultPlansOnFirstUse(comm.cudaDevice);
    // A split on the parent's GPU shares its proxy (one thread for the port channels of both).
    const ncclComm* parent = comm.split ? comm.split->parent : nullptr;
    comm.executor = std::make_unique<Executor>(comm.communicator, parent ? parent->executor.get() : nullptr);
    comm.ranksPerNode = uint32_t(comm.communicator->localWorldSize());
  }
  if (comm.split) return;

  std::string whyNot;
  comm.real = realNccl(&whyNot);
  // NCCL refuses two ranks on one GPU, so ranks sharing one (a testing mode) cannot forward.
  const std::vector<int> sharers = comm.communicator ? comm.communicator->ranksSharingGpu() : std::vector<int>{};
  if (comm.real != nullptr && sharers.size() > 1) {
    comm.real = nullptr;
    whyNot = rankList(sharers) + " share GPU " + comm.communicator->cudaDeviceBusId() +
             " (LOOM_SHARE_GPU=1), and NCCL refuses two ranks on one GPU";
  }
  const uint8_t mine = comm.real != nullptr ? 1 : 0;
  const auto have = comm.bootstrap->allGather(std::span<const uint8_t>(&mine, 1));
  std::vector<int> without;
  for (int rank = 0; rank < comm.worldSize; ++rank) {
    if (have[rank].empty() || have[rank][0] == 0) without.push_back(rank);
  }
  if (!without.empty()) {
    comm.realMissing =
        comm.real == nullptr ? whyNot : rankList(without) + (without.size() == 1 ? " has" : " have") + " no real NCCL";
    return;
  }
  // Rank 0: status byte, then the id or the reason it has none.
  std::vector<uint8_t> message;
  if (comm.rank == 0) {
    ncclUniqueId realId{};
    const ncclResult_t result = comm.real->ncclGetUniqueId(&realId);
    if (result == ncclSuccess) {
      message.push_back(1);
      message.insert(message.end(), realId.internal, realId.internal + sizeof(realId.internal));
    } else {
      const std::string why = std::string("rank 0's real ncclGetUniqueId failed: ") +
                              comm.real->ncclGetErrorString(result) + ": " + comm.real->ncclGetLastError(nullptr);
      message.push_back(0);
      message.insert(message.end(), why.begin(), why.end());
    }
  }
  const auto all = comm.bootstrap->allGather(message);
  const auto& root = all[0];
  if (root.empty() || root[0] != 1 || root.size() != 1 + sizeof(ncclUniqueId)) {
    comm.realMissing = root.size() > 1 ? std::string(root.begin() + 1, root.end()) : "rank 0 sent no real NCCL id";
    return;
  }
  ncclUniqueId realId;
  std::memcpy(realId.internal, root.data() + 1, sizeof(realId.internal));
  comm.realId = realId;
}

// The real NCCL's own split or shrink of the parent's real communicator; every rank of the parent
// calls it, those that join no communicator included.
void splitRealSide(ncclComm& comm, ncclConfig_t& config) {
  const ncclCommSplitSpec& spec = *comm.split;
  ncclComm& parent = *spec.parent;
  if (parent.realComm == nullptr) return;
  ncclResult_t result = ncclSuccess;
  if (spec.excluded) {
#ifdef LOOM_NCCL_HAS_NCCLCOMMSHRINK
    if (comm.real->ncclCommShrink == nullptr) {
      comm.realMissing = "the real NCCL (" + comm.real->path + ") has no ncclCommShrink";
      comm.realTried = true;
      return;
    }
    std::vector<int> excluded = *spec.excluded;
    result = comm.real->ncclCommShrink(parent.realComm, excluded.data(), int(excluded.size()), &comm.realComm, &config,
                                       spec.shrinkFlags);
#endif
  } else {
    result = comm.real->ncclCommSplit(parent.realComm, spec.color, spec.key, &comm.realComm, &config);
  }
  comm.realTried = true;
  if (result != ncclSuccess && result != ncclInProgress) {
    comm.realMissing = std::string("the real NCCL's ") + spec.function() +
                       " failed: " + comm.real->ncclGetErrorString(result) + ": " +
                       comm.real->ncclGetLastError(parent.realComm);
    comm.realComm = nullptr;
  }
}

void connectRealSide(ncclComm& comm) {
  const bool fromParent = comm.split && comm.split->parent->realComm != nullptr;
  if (!comm.realId && !fromParent) return;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (comm.config) config = *comm.config;
  // Loom's side is ready when init returns; the real side must be too (no ncclInProgress to poll).
  config.blocking = 1;
  int previous = -1;
  if (!comm.settings.cpuBackend) {
    cudaGetDevice(&previous);
    cudaSetDevice(comm.cudaDevice);
  }
  if (fromParent) {
    splitRealSide(comm, config);
  } else {
    const ncclResult_t result =
        comm.real->ncclCommInitRankConfig(&comm.realComm, comm.worldSize, *comm.realId, comm.rank, &config);
    comm.realTried = true;
    if (result != ncclSuccess && result != ncclInProgress) {
      comm.realMissing = std::string("the real NCCL's ncclCommInitRankConfig failed: ") +
                         comm.real->ncclGetErrorString(result) + ": " + comm.real->ncclGetLastError(nullptr);
      comm.realComm = nullptr;
    }
  }
  if (previous >= 0) cudaSetDevice(previous);
}

// Every rank forwards, or none does.
void agreeOnRealSide(ncclComm& comm) {
  if (!comm.realTried || !comm.bootstrap) return;
  ncclResult_t state = ncclSuccess;
  if (comm.realComm != nullptr && comm.real->ncclCommGetAsyncError(comm.realComm, &state) == ncclSuccess &&
      state != ncclSuccess) {
    comm.realMissing = std::string("the real NCCL's communicator failed to initialise: ") +
                       comm.real->ncclGetErrorString(state) + ": " + comm.real->ncclGetLastError(comm.realComm);
    comm.real->ncclCommAbort(comm.realComm);
    comm.realComm = nullptr;
  }
  const uint8_t mine = comm.realComm != nullptr ? 1 : 0;
  const auto all = comm.bootstrap->allGather(std::span<const uint8_t>(&mine, 1));
  std::vector<int> failed;
  for (int rank = 0; rank < comm.worldSize; ++rank) {
    if (all[rank].empty() || all[rank][0] == 0) failed.push_back(rank);
  }
  if (failed.empty()) return;
  if (comm.realComm != nullptr) {
    comm.real->ncclCommAbort(comm.realComm);
    comm.realComm = nullptr;
    comm.realMissing = "the real NCCL's communicator failed to initialise on " + rankList(failed);
  }
}

void reportReady(const ncclComm& comm) {
  if (comm.settings.forceNccl && comm.realComm == nullptr) {
    throw Failure(ncclInvalidUsage,
                  "LOOM_NCCL_FORCE_NCCL is set but the real NCCL is not available: " + comm.realMissing);
  }
  const std::string who = "rank " + std::to_string(comm.rank) + "/" + std::to_string(comm.worldSize);
  const std::string loom = comm.executor ? "Loom plans on (" + std::to_string(PlanRegistry::global().list().size()) +
                                               " registered, " + std::to_string(comm.ranksPerNode) + " ranks per node" +
                                               (comm.settings.cpuBackend ? ", CPU backend" : "") + ")"
                                         : "Loom off (" + comm.loomMissing + ")";
  const std::string real =
      comm.realComm ? "forwarding to " + comm.real->path + " (NCCL " + std::to_string(comm.real->version) + ")"
                    : "no forwarding (" + comm.realMissing + ")";
  logLine(LogLevel::kInfo, comm.cudaDevice,
          comm.origin + " " + who + " (comm " + std::to_string(comm.serial) + "): " + loom + ", " + real);
  if (comm.realComm == nullptr && comm.settings.library != "none") {
    logLine(LogLevel::kWarn, comm.cudaDevice,
            who + ": calls Loom cannot run will fail: the real NCCL is not available: " + comm.realMissing);
  }
  if (comm.executor && PlanRegistry::global().list().empty()) {
    logLine(LogLevel::kWarn, comm.cudaDevice,
            who +
                ": no Loom plans are registered (run `loom install-plans`, or check LOOM_CACHE_DIR); "
                "every call goes to NCCL");
  }
}

}  // namespace

void forward(ncclComm& comm, const PendingCall& call) {
  const RealNccl& real = *comm.real;
  const CallInfo& info = call.info;
  auto need = [&](auto function, const char* name) {
    if (function == nullptr) {
      throw Failure(ncclInvalidUsage,
                    "the real NCCL (" + real.path + ", version " + std::to_string(real.version) + ") has no " + name);
    }
    return function;
  };
  ncclResult_t result = ncclSuccess;
  const char* name = "";
  switch (info.call) {
    case Call::kAllReduce:
      name = "ncclAllReduce";
      result = need(real.ncclAllReduce, name)(call.send, call.recv, info.count, info.dataType, info.op, comm.realComm,
                                              call.stream);
      break;
    case Call::kAllGather:
      name = "ncclAllGather";
      result =
          need(real.ncclAllGather, name)(call.send, call.recv, info.count, info.dataType, comm.realComm, call.stream);
      break;
    case Call::kReduceScatter:
      name = "ncclReduceScatter";
      result = need(real.ncclReduceScatter, name)(call.send, call.recv, info.count, info.dataType, info.op,
                                                  comm.realComm, call.stream);
      break;
    case Call::kBroadcast:
      // Bcast comes here as Broadcast(buff, buff): the real ncclBcast would call ncclBroadcast through
      // the symbol table, which may lead back into this library.
      name = "ncclBroadcast";
      result = need(real.ncclBroadcast, name)(call.send, call.recv, info.count, info.dataType, info.root, comm.realComm,
                                              call.stream);
      break;
    case Call::kReduce:
      name = "ncclReduce";
      result = need(real.ncclReduce, name)(call.send, call.recv, info.count, info.dataType, info.op, info.root,
                                           comm.realComm, call.stream);
      break;
#ifdef LOOM_NCCL_HAS_NCCLALLTOALL
    case Call::kAllToAll:
      name = "ncclAlltoAll";
      result =
          need(real.ncclAlltoAll, name)(call.send, call.recv, info.count, info.dataType, comm.realComm, call.stream);
      break;
#endif
#ifdef LOOM_NCCL_HAS_NCCLGATHER
    case Call::kGather:
      name = "ncclGather";
      result = need(real.ncclGather, name)(call.send, call.recv, info.count, info.dataType, info.root, comm.realComm,
                                           call.stream);
      break;
#endif
#ifdef LOOM_NCCL_HAS_NCCLSCATTER
    case Call::kScatter:
      name = "ncclScatter";
      result = need(real.ncclScatter, name)(call.send, call.recv, info.count, info.dataType, info.root, comm.realComm,
                                            call.stream);
      break;
#endif
    case Call::kSend:
      name = "ncclSend";
      result = need(real.ncclSend, name)(call.send, info.count, info.dataType, call.peer, comm.realComm, call.stream);
      break;
    case Call::kRecv:
      name = "ncclRecv";
      result = need(real.ncclRecv, name)(call.recv, info.count, info.dataType, call.peer, comm.realComm, call.stream);
      break;
    default:  // a collective this nccl.h does not declare, so none of its callers can make it
      throw Failure(ncclInvalidUsage, "the nccl.h Loom was built against has no entry point for this call");
  }
  checkReal(comm, result, name);
}

namespace {

uint64_t logKey(const CallInfo& info, const Decision& decision) {
  const uint64_t bytes = info.count * ncclTypeBytes(info.dataType);
  // Buckets are powers of two with the sizes just below them: (2^(k-1), 2^k].
  const uint64_t bucket = bytes == 0 ? 0 : std::bit_width(bytes - 1);
  uint64_t key = uint64_t(info.call) | bucket << 8 | uint64_t(decision.route) << 16 | uint64_t(decision.reason) << 24 |
                 uint64_t(info.inplace) << 32 | uint64_t(info.capturing) << 33;
  if (decision.plan) key ^= decision.plan->contentHash * 0x9E3779B97F4A7C15ull;
  return key;
}

// Once per collective, size bucket (powers of two) and outcome at INFO; every call at TRACE.
void note(ncclComm& comm, const CallInfo& info, const Decision& decision) {
  if (!logEnabled(LogLevel::kInfo)) return;
  const bool first = comm.logged.insert(logKey(info, decision)).second;
  if (!first && !logEnabled(LogLevel::kTrace)) return;
  const std::string text =
      "rank " + std::to_string(comm.rank) + "/" + std::to_string(comm.worldSize) + " " + describe(info, decision);
  logLine(first ? LogLevel::kInfo : LogLevel::kTrace, comm.cudaDevice, text);
}

// The log line of a call's outcome and its count in the coverage summary.
void noteAndCount(ncclComm& comm, const CallInfo& info, const Decision& decision) {
  note(comm, info, decision);
  const bool wholeBuffer = info.call == Call::kReduceScatter || info.call == Call::kAllToAll;
  comm.coverage->count(info.call, decision.route, decision.reason,
                       info.count * ncclTypeBytes(info.dataType) * (wholeBuffer ? info.worldSize : 1));
}

// Makes the communicator's GPU current while a call is set up and launched, whatever device the thread
// had (a process that drives several GPUs calls with any of them current, as NCCL allows), and puts
// the thread's device back after.
class DeviceScope {
 public:
  explicit DeviceScope(const ncclComm& comm) {
    if (comm.settings.cpuBackend || comm.cudaDevice < 0) return;
    checkCuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ == comm.cudaDevice) {
      previous_ = -1;
      return;
    }
    checkCuda(cudaSetDevice(comm.cudaDevice), "cudaSetDevice(" + std::to_string(comm.cudaDevice) + ")");
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

uint32_t nextSerial() {
  static std::atomic<uint32_t> serial{0};
  return ++serial;
}

}  // namespace

std::unique_ptr<ncclComm> newComm(int worldSize, int rank, const ncclUniqueId& id, const ncclConfig_t* config) {
  if (worldSize < 1) throw Failure(ncclInvalidArgument, "nranks: " + std::to_string(worldSize) + " (at least 1)");
  if (rank < 0 || rank >= worldSize) {
    throw Failure(ncclInvalidArgument,
                  "rank: " + std::to_string(rank) + " is not in 0.." + std::to_string(worldSize - 1));
  }
  auto comm = std::make_unique<ncclComm>();
  comm->serial = nextSerial();
  comm->settings = settingsFromEnvironment();
  configureLog(comm->settings);
  comm->id = decodeUniqueId(id);
  comm->rank = rank;
  comm->worldSize = worldSize;
  if (config != nullptr) {
    ncclConfig_t copy = NCCL_CONFIG_INITIALIZER;
    std::memcpy(&copy, config, std::min(sizeof(copy), config->size));
    comm->config = copy;
  }
  if (!comm->settings.cpuBackend) checkCuda(cudaGetDevice(&comm->cudaDevice), "cudaGetDevice");
  return comm;
}

std::unique_ptr<ncclComm> newSplitComm(ncclComm& parent, const ncclCommSplitSpec& spec, const ncclConfig_t* config) {
  if (!parent.ready) {
    throw Failure(
        ncclInvalidUsage,
        std::string("comm: still being created in the open group; call ncclGroupEnd before ") + spec.function());
  }
  if (!spec.excluded && spec.color < 0 && spec.color != NCCL_SPLIT_NOCOLOR) {
    throw Failure(ncclInvalidArgument, "color: " + std::to_string(spec.color) +
                                           " (a color is at least 0, or NCCL_SPLIT_NOCOLOR to join no communicator)");
  }
  if (spec.excluded) {
    for (int rank : *spec.excluded) {
      if (rank < 0 || rank >= parent.worldSize) {
        throw Failure(ncclInvalidArgument, "excludeRanksList: " + std::to_string(rank) + " is not a rank of this " +
                                               std::to_string(parent.worldSize) + "-rank communicator");
      }
      if (rank == parent.rank) {
        throw Failure(ncclInvalidArgument, "excludeRanksList: holds this rank (" + std::to_string(rank) +
                                               "); a rank left out does not call ncclCommShrink");
      }
    }
  }
  auto comm = std::make_unique<ncclComm>();
  comm->serial = nextSerial();
  comm->settings = parent.settings;
  comm->cudaDevice = parent.cudaDevice;
  comm->split = spec;
  comm->split->parent = &parent;
  if (config != nullptr) {
    ncclConfig_t copy = NCCL_CONFIG_INITIALIZER;
    std::memcpy(&copy, config, std::min(sizeof(copy), config->size));
    comm->config = copy;
  }
  return comm;
}

void connectBegin(const std::vector<ncclComm*>& comms, bool realGroupOpen) {
  forEach(comms, connectLoomSide);
  // Several ranks of this thread: the real NCCL connects them together inside one group.
  const RealNccl* real = nullptr;
  for (ncclComm* comm : comms) {
    if (comm->realId || (comm->split && comm->split->parent->realComm != nullptr)) real = comm->real;
  }
  const bool group = real != nullptr && comms.size() > 1 && !realGroupOpen;
  if (group) checkReal(*comms[0], real->ncclGroupStart(), "ncclGroupStart");
  for (ncclComm* comm : comms) connectRealSide(*comm);
  if (group) real->ncclGroupEnd();  // a rank that failed shows in its communicator's async error
}

void connectFinish(const std::vector<ncclComm*>& comms) {
  forEach(comms, agreeOnRealSide);
  for (ncclComm* comm : comms) {
    if (comm->split) {
      // The parent may go before the child: nothing of it is kept.
      if (!comm->bootstrap && comm->split->out != nullptr) *comm->split->out = nullptr;
      const ncclCommSplitSpec& spec = *comm->split;
      comm->origin =
          std::string(spec.function()) + " of comm " + std::to_string(spec.parent->serial) +
          (spec.excluded ? " (" + rankList(*spec.excluded) + " left out)"
                         : " (color " + std::to_string(spec.color) + ", key " + std::to_string(spec.key) + ")");
      comm->split.reset();
    }
    if (!comm->bootstrap) continue;  // joined no communicator (NCCL_SPLIT_NOCOLOR)
    reportReady(*comm);
    comm->coverage = CommunicatorCoverage::create(
        {comm->serial, comm->origin, comm->rank, comm->worldSize, comm->cudaDevice}, comm->settings.statsFile);
    sayGoodbyeAtExit(comm->bootstrap);
    comm->ready = true;
  }
}

// How long ncclCommAbort waits for a call in flight on another thread to let go of the executor.
constexpr int64_t kAbortWaitMs = 1000;

void destroy(ncclComm* comm, bool abort) {
  for (auto& [peer, link] : comm->links) destroy(link.get(), abort);
  comm->links.clear();
  if (comm->linkStream != nullptr) cudaStreamDestroy(comm->linkStream);
  if (comm->orderEvent != nullptr) cudaEventDestroy(comm->orderEvent);
  comm->worker.reset();
  if (comm->coverage) comm->coverage->close();
  if (comm->realComm != nullptr) {
    abort ? comm->real->ncclCommAbort(comm->realComm) : comm->real->ncclCommDestroy(comm->realComm);
    comm->realComm = nullptr;
  }
  // An abort first ends the kernels that wait on peers (they return; the context stays usable); a destroy
  // waits for the programs in flight.
  if (abort && comm->executor) comm->executor->abort(kAbortWaitMs);
  comm->executor.reset();
  for (void* scratch : comm->exchangeScratch) cudaFree(scratch);
  comm->exchangeScratch.clear();
  comm->communicator.reset();
  comm->bootstrap.reset();
}

void checkReal(const ncclComm& comm, ncclResult_t result, const char* function) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  const char* detail = comm.real->ncclGetLastError(comm.realComm);
  throw Failure(result, std::string("the real NCCL's ") + function +
                            " failed: " + comm.real->ncclGetErrorString(result) +
                            (detail && *detail ? std::string(": ") + detail : ""));
}

ncclResult_t run(ncclComm* comm, PendingCall call) {
  if (comm == nullptr) throw Failure(ncclInvalidArgument, "comm: null");
  if (!comm->ready) {
    throw Failure(ncclInvalidUsage, "comm: still being created in the open group; call ncclGroupEnd first");
  }
  CallInfo& info = call.info;
  info.worldSize = uint32_t(comm->worldSize);
  info.ranksPerNode = comm->ranksPerNode;
  info.grouped = inGroup();
  info.capturing = comm->executor && comm->executor->capturing(call.stream);
  if (comm->executor) info.placement = comm->executor->placement();
  Decision decision = decide(info, comm->settings, comm->capabilities(), PlanRegistry::global());
  // A shape with no bundled plan gets one compiled on first use, as the bundled set would have it (so not
  // with the bundled plans off); inside a group, at ncclGroupEnd (useJitPlan, runDeferredJit).
  if (decision.reason == Reason::kNoPlan && comm->settings.jit && comm->executor && decision.op == ReduceOp::kSum &&
      defaultPlansEnabled()) {
    useJitPlan(*comm, info, decision);  // no plan: the reason says why (jit_failed or no_plan)
    if (decision.jitAtGroupEnd) {
      holdCall(comm, call, decision);
      return ncclSuccess;
    }
  }
  // A send/recv over a link is counted where its link chooses its plan (point_to_point.cc).
  if (decision.reason != Reason::kPointToPointLink) noteAndCount(*comm, info, decision);
  switch (decision.route) {
    case Route::kNothing:
      return ncclSuccess;
    case Route::kLocalCopy:
      localCopy(*comm, call.recv, call.send, info.count * ncclTypeBytes(info.dataType), call.stream);
      return ncclSuccess;
    case Route::kForward:
      forward(*comm, call);
      return ncclSuccess;
    case Route::kFail:
      throw Failure(ncclInvalidUsage, describe(info, decision) + ": " + comm->realMissing);
    case Route::kLoom:
      if (info.grouped) {
        holdCall(comm, call, decision);
      } else {
        runOnLoom(*comm, call, decision);
      }
      return ncclSuccess;
  }
  return ncclInternalError;
}

bool resolveDeferredJit(ncclComm& comm, const PendingCall& call, Decision& decision) {
  CallInfo info = call.info;
  info.grouped = false;  // every communicator of the group now runs on a thread of its own: the exchange can wait
  decision.jitAtGroupEnd = false;
  useJitPlan(comm, info, decision);
  noteAndCount(comm, call.info, decision);
  if (decision.route == Route::kFail)
    throw Failure(ncclInvalidUsage, describe(info, decision) + ": " + comm.realMissing);
  return decision.route == Route::kLoom;
}

void noteCall(ncclComm& comm, const CallInfo& info, const Decision& decision) { noteAndCount(comm, info, decision); }

std::vector<const PendingCall*> runPointToPointOnLoom(
    ncclComm& comm, const std::vector<std::pair<const PendingCall*, Decision>>& calls) {
  const DeviceScope onCommDevice(comm);
  return runPointToPoint(comm, calls);
}

bool runDeferredJit(ncclComm& comm, const PendingCall& call, Decision decision) {
  if (!resolveDeferredJit(comm, call, decision)) return false;
  runOnLoom(comm, call, decision);
  return true;
}

void countLaunches(ncclComm& comm, uint64_t launches) {
  if (comm.coverage) comm.coverage->countLaunches(launches);
}

void runOnLoom(ncclComm& comm, const PendingCall& call, const Decision& decision) {
  const DeviceScope onCommDevice(comm);
  const CallInfo& info = call.info;
  void* stream = call.stream;
  if (info.call == Call::kSend || info.call == Call::kRecv) {
    // A lone send or receive: a group of one, which its link may still hand to NCCL (no plan there).
    for (const PendingCall* forwarded : runPointToPoint(comm, {{&call, decision}})) forward(comm, *forwarded);
    return;
  }
  if (info.call == Call::kGather || info.call == Call::kScatter) return runGatherOrScatter(comm, call, decision);
  const Plan& plan = *decision.plan;
  countLaunches(comm, decision.average && (info.call != Call::kReduce || comm.rank == info.root) ? 2 : 1);
  switch (info.call) {
    case Call::kBroadcast:
      if (comm.rank == info.root) localCopy(comm, call.recv, call.send, decision.messageBytes, call.stream);
      comm.executor->execute(plan, call.recv, call.recv, decision.messageBytes, decision.dataType, decision.op, stream);
      return;
    case Call::kReduce: {
      // An in-place plan (see selectionRequestFor): the root reduces into recvbuff, so it first copies
      // its sendbuff there; a non-root rank's recvbuff is not written, and may be null, so it passes
      // its sendbuff as both buffers.
      const bool root = comm.rank == info.root;
      void* buffer = root ? call.recv : const_cast<void*>(call.send);
      if (root) localCopy(comm, call.recv, call.send, decision.messageBytes, call.stream);
      comm.executor->execute(plan, buffer, buffer, decision.messageBytes, decision.dataType, decision.op, stream);
      if (decision.average && root) {
        comm.executor->scale(call.recv, decision.messageBytes, decision.dataType, 1.0f / float(comm.worldSize), stream);
      }
      return;
    }
    default:
      comm.executor->execute(plan, call.send, call.recv, decision.messageBytes, decision.dataType, decision.op, stream);
      if (decision.average) {
        comm.executor->scale(call.recv, info.count * ncclTypeBytes(info.dataType), decision.dataType,
                             1.0f / float(comm.worldSize), stream);
      }
  }
}

}  // namespace loom::nccl
