// The exported NCCL C API (nccl.h of the toolkit this library is built with). Each entry point
// checks its arguments, hands the work to the communicator (nccl_comm.hpp) or the group
// (group.hpp), and turns every failure into an ncclResult_t with a text for ncclGetLastError. Each
// ncclX has its pncclX twin, as in NCCL, for profilers that interpose on the nccl names.

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "group.hpp"
#include "log.hpp"
#include "loom/unique_id.hpp"
#include "nccl_comm.hpp"
#include "real_nccl.hpp"
#include "result.hpp"
#include "unique_id_format.hpp"
#include "windows.hpp"

using loom::nccl::Call;
using loom::nccl::Failure;
using loom::nccl::guarded;
using loom::nccl::PendingCall;

namespace {

// The real NCCL's library when `comm` is one of its communicators rather than ours: a program that
// links NCCL (torch does) has it loaded before LD_PRELOAD puts this library in front, so NCCL's calls
// of its own API (ncclCommFinalize calls ncclCommGetAsyncError) arrive here with its communicator.
const loom::nccl::RealNccl* foreignComm(ncclComm_t comm) {
  if (comm == nullptr || comm->magic == ncclComm::kMagic) return nullptr;
  return loom::nccl::realNccl();
}

ncclComm& need(ncclComm_t comm) {
  if (comm == nullptr) throw Failure(ncclInvalidArgument, "comm: null");
  return *comm;
}

// The end of every collective entry point: its buffers (one buffer is in place), then the dispatch.
ncclResult_t runWithBuffers(ncclComm_t comm, PendingCall& call, const void* sendbuff, void* recvbuff) {
  call.info.inplace = sendbuff == recvbuff;
  call.send = sendbuff;
  call.recv = recvbuff;
  return loom::nccl::run(comm, call);
}

PendingCall makeCall(Call call, size_t count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  need(comm);
  // As NCCL: once an asynchronous error was reported (a peer gone), calls fail at once rather than wait for it.
  if (const ncclResult_t async = comm->asyncError.load(); async != ncclSuccess) {
    std::string earlier;
    {
      std::lock_guard<std::mutex> lock(comm->errorMutex);
      earlier = comm->lastError;
    }
    throw Failure(async, "the communicator has an asynchronous error (" + earlier +
                             "); abort it (ncclCommAbort) and create a new one");
  }
  if (int(type) < 0 || int(type) >= int(ncclNumTypes)) {
    throw Failure(ncclInvalidArgument, "datatype: " + std::to_string(int(type)) + " is not an ncclDataType_t");
  }
  PendingCall pending;
  pending.info.call = call;
  pending.info.count = count;
  pending.info.dataType = type;
  pending.stream = stream;
  return pending;
}

void checkOp(ncclRedOp_t op) {
  // Values from ncclNumOps up are the real NCCL's custom operators (ncclRedOpCreatePreMulSum).
  if (int(op) < 0) throw Failure(ncclInvalidArgument, "op: " + std::to_string(int(op)) + " is not an ncclRedOp_t");
}

void checkRank(int value, const ncclComm& comm, const char* what) {
  if (value < 0 || value >= comm.worldSize) {
    throw Failure(ncclInvalidArgument, std::string(what) + ": " + std::to_string(value) + " is not a rank of this " +
                                           std::to_string(comm.worldSize) + "-rank communicator");
  }
}

void checkBuffer(const void* buffer, size_t count, const char* what) {
  if (buffer == nullptr && count > 0) throw Failure(ncclInvalidArgument, std::string(what) + ": null");
}

const char* byteOffset(const void* base, uint64_t bytes) { return static_cast<const char*>(base) + bytes; }

// The real NCCL's communicator of `comm`, for calls that only it can do.
ncclComm_t realCommFor(const ncclComm& comm, const char* function) {
  if (comm.realComm == nullptr) {
    throw Failure(ncclInvalidUsage, std::string(function) +
                                        " is the real NCCL's, which is not available on this "
                                        "communicator: " +
                                        comm.realMissing);
  }
  return comm.realComm;
}

template <class Function>
Function needFunction(const ncclComm& comm, Function function, const char* name) {
  if (function == nullptr) {
    throw Failure(ncclInvalidUsage, "the real NCCL (" + comm.real->path + ") has no " + std::string(name));
  }
  return function;
}

ncclResult_t initRank(const char* function, ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank,
                      const ncclConfig_t* config) {
  return guarded(function, nullptr, [&] {
    if (out == nullptr) throw Failure(ncclInvalidArgument, "comm: null");
    *out = nullptr;
    std::unique_ptr<ncclComm> comm = loom::nccl::newComm(nranks, rank, id, config);
    comm->origin = function;  // the coverage report and the log say how each communicator was made
    if (loom::nccl::inGroup()) {
      // Several ranks from one thread: they connect together at ncclGroupEnd.
      *out = comm.release();
      loom::nccl::holdInit(*out);
      return ncclSuccess;
    }
    loom::nccl::connectBegin({comm.get()}, false);
    loom::nccl::connectFinish({comm.get()});
    *out = comm.release();
    return ncclSuccess;
  });
}

// ncclCommSplit and ncclCommShrink: a communicator of the members, with Loom's side over a bootstrap of
// their own and the real NCCL's split alike. Inside a group (several ranks driven by this thread) it
// connects at ncclGroupEnd, as a grouped init does.
ncclResult_t makeChild(ncclComm& parent, const ncclCommSplitSpec& spec, const ncclConfig_t* config) {
  std::unique_ptr<ncclComm> child = loom::nccl::newSplitComm(parent, spec, config);
  if (loom::nccl::inGroup()) {
    *spec.out = child.release();
    loom::nccl::holdInit(*spec.out);
    return ncclSuccess;
  }
  loom::nccl::connectBegin({child.get()}, false);
  loom::nccl::connectFinish({child.get()});
  if (child->bootstrap) *spec.out = child.release();
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guarded("ncclGetUniqueId", nullptr, [&] {
    if (uniqueId == nullptr) throw Failure(ncclInvalidArgument, "uniqueId: null");
    *uniqueId = loom::nccl::encodeUniqueId(loom::UniqueId::create());
    return ncclSuccess;
  });
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return initRank("ncclCommInitRank", comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  return initRank("ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                      ncclConfig_t* config) {
  if (nId < 1 || commIds == nullptr) return ncclInvalidArgument;
  // Loom's bootstrap has one root: the first id's (rank 0 made it, in the process of rank 0).
  return initRank("ncclCommInitRankScalable", newcomm, nranks, commIds[0], myrank, config);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return guarded("ncclCommInitAll", nullptr, [&] {
    if (comms == nullptr) throw Failure(ncclInvalidArgument, "comm: null");
    if (ndev < 1) throw Failure(ncclInvalidArgument, "ndev: " + std::to_string(ndev) + " (at least 1)");
    ncclUniqueId id;
    ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) return result;
    const bool cpu = loom::nccl::settingsFromEnvironment().cpuBackend;
    int previous = -1;
    if (!cpu) cudaGetDevice(&previous);
    result = loom::nccl::groupStart();
    for (int i = 0; i < ndev && result == ncclSuccess; ++i) {
      if (!cpu) cudaSetDevice(devlist != nullptr ? devlist[i] : i);
      result = initRank("ncclCommInitAll", &comms[i], ndev, id, i, nullptr);
    }
    const ncclResult_t end = guarded("ncclCommInitAll", nullptr, loom::nccl::groupEnd);
    if (previous >= 0) cudaSetDevice(previous);
    return result != ncclSuccess ? result : end;
  });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (auto* real = foreignComm(comm)) return real->ncclCommFinalize(comm);
  return guarded("ncclCommFinalize", comm, [&] {
    ncclComm& self = need(comm);
    if (self.realComm != nullptr)
      loom::nccl::checkReal(self, self.real->ncclCommFinalize(self.realComm), "ncclCommFinalize");
    return ncclSuccess;
  });
}

namespace {

// ncclCommDestroy and ncclCommAbort: the same end, without waiting for peers when aborting.
ncclResult_t endCommunicator(ncclComm_t comm, bool abort) {
  if (comm == nullptr) return ncclSuccess;
  if (auto* real = foreignComm(comm)) return abort ? real->ncclCommAbort(comm) : real->ncclCommDestroy(comm);
  return guarded(abort ? "ncclCommAbort" : "ncclCommDestroy", nullptr, [&] {
    std::unique_ptr<ncclComm> owned(comm);
    loom::nccl::destroy(comm, abort);
    return ncclSuccess;
  });
}

}  // namespace

ncclResult_t ncclCommDestroy(ncclComm_t comm) { return endCommunicator(comm, false); }

ncclResult_t ncclCommAbort(ncclComm_t comm) { return endCommunicator(comm, true); }

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  return guarded("ncclCommSplit", comm, [&] {
    ncclComm& self = need(comm);
    if (newcomm == nullptr) throw Failure(ncclInvalidArgument, "newcomm: null");
    *newcomm = nullptr;
    ncclCommSplitSpec spec;
    spec.color = color;
    spec.key = key;
    spec.out = newcomm;
    return makeChild(self, spec, config);
  });
}

#ifdef LOOM_NCCL_HAS_NCCLCOMMSHRINK
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int shrinkFlags) {
  return guarded("ncclCommShrink", comm, [&] {
    ncclComm& self = need(comm);
    if (newcomm == nullptr) throw Failure(ncclInvalidArgument, "newcomm: null");
    *newcomm = nullptr;
    if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr)) {
      throw Failure(ncclInvalidArgument, "excludeRanksList: null, or excludeRanksCount " +
                                             std::to_string(excludeRanksCount) + " below 0");
    }
    ncclCommSplitSpec spec;
    spec.excluded = std::vector<int>(excludeRanksList, excludeRanksList + excludeRanksCount);
    spec.shrinkFlags = shrinkFlags;
    spec.out = newcomm;
    return makeChild(self, spec, config);
  });
}
#endif

#ifdef LOOM_NCCL_HAS_NCCLCOMMREVOKE
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return guarded("ncclCommRevoke", comm, [&] {
    ncclComm& self = need(comm);
    ncclComm_t real = realCommFor(self, "ncclCommRevoke");
    loom::nccl::checkReal(self, needFunction(self, self.real->ncclCommRevoke, "ncclCommRevoke")(real, revokeFlags),
                          "ncclCommRevoke");
    return ncclSuccess;
  });
}
#endif

#ifdef LOOM_NCCL_HAS_NCCLCOMMWINDOWREGISTER
// Collective. With NCCL_WIN_COLL_SYMMETRIC, Loom's calls on buffers in the window exchange no addresses
// (windows.hpp); the real NCCL registers it too.
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  return guarded("ncclCommWindowRegister", comm, [&] {
    ncclComm& self = need(comm);
    if (win == nullptr) throw Failure(ncclInvalidArgument, "win: null");
    *win = loom::nccl::registerWindow(self, buff, size, winFlags);
    return ncclSuccess;
  });
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return guarded("ncclCommWindowDeregister", comm, [&] {
    loom::nccl::deregisterWindow(need(comm), win);
    return ncclSuccess;
  });
}
#endif

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with LOOM_NCCL_DEBUG=WARN for details)";
    case ncclSystemError:
      return "unhandled system error (run with LOOM_NCCL_DEBUG=WARN for details)";
    case ncclInternalError:
      return "internal error (run with LOOM_NCCL_DEBUG=WARN for details)";
    case ncclInvalidArgument:
      return "invalid argument (run with LOOM_NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with LOOM_NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) { return loom::nccl::lastError(comm); }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
void ncclResetDebugInit() {}
#pragma GCC diagnostic pop

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr) return ncclInvalidArgument;
  if (auto* real = foreignComm(comm)) return real->ncclCommGetAsyncError(comm, asyncError);
  // A peer whose process is gone (or an earlier Loom call that failed) is this communicator's asynchronous
  // error, as NCCL reports a remote failure: torch's watchdog then ends the job's waits at once, not at the
  // process group's timeout.
  if (comm->asyncError.load() == ncclSuccess && comm->executor) {
    if (const std::optional<loom::Error> error = comm->executor->asyncError()) {
      const std::string text = "comm " + std::to_string(comm->serial) + " rank " + std::to_string(comm->rank) +
                               ": asynchronous error ncclRemoteError: " + error->what();
      loom::nccl::recordError(comm, text);
      if (comm->asyncError.exchange(ncclRemoteError) == ncclSuccess) {
        loom::nccl::logLine(loom::nccl::LogLevel::kWarn, comm->cudaDevice, text);
      }
    }
  }
  ncclResult_t state = comm->asyncError.load();
  if (state == ncclSuccess && comm->realComm != nullptr) {
    const ncclResult_t result = comm->real->ncclCommGetAsyncError(comm->realComm, &state);
    if (result != ncclSuccess) return result;
  }
  *asyncError = state;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  if (auto* real = foreignComm(comm)) return real->ncclCommCount(comm, count);
  *count = comm->worldSize;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) return ncclInvalidArgument;
  if (auto* real = foreignComm(comm)) return real->ncclCommCuDevice(comm, device);
  *device = comm->cudaDevice;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  if (auto* real = foreignComm(comm)) return real->ncclCommUserRank(comm, rank);
  *rank = comm->rank;
  return ncclSuccess;
}

// Loom registers the buffers of each call itself (once per buffer, cached); a registration is the
// real NCCL's, for the calls it runs. Without it the handle is the buffer.
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return guarded("ncclCommRegister", comm, [&] {
    ncclComm& self = need(comm);
    if (handle == nullptr) throw Failure(ncclInvalidArgument, "handle: null");
    if (self.realComm == nullptr) {
      *handle = buff;
      return ncclSuccess;
    }
    loom::nccl::checkReal(self, self.real->ncclCommRegister(self.realComm, buff, size, handle), "ncclCommRegister");
    return ncclSuccess;
  });
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return guarded("ncclCommDeregister", comm, [&] {
    ncclComm& self = need(comm);
    if (self.realComm != nullptr) {
      loom::nccl::checkReal(self, self.real->ncclCommDeregister(self.realComm, handle), "ncclCommDeregister");
    }
    return ncclSuccess;
  });
}

// The real NCCL's allocator when there is one (cuMem memory that both it and Loom can share), else
// cudaMalloc. The process opens the real library once, so an allocation and its free agree.
ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return guarded("ncclMemAlloc", nullptr, [&] {
    if (ptr == nullptr) throw Failure(ncclInvalidArgument, "ptr: null");
    if (const auto* real = loom::nccl::realNccl(); real != nullptr && real->ncclMemAlloc != nullptr) {
      return real->ncclMemAlloc(ptr, size);
    }
    const cudaError_t status = cudaMalloc(ptr, size);
    if (status != cudaSuccess) {
      throw Failure(ncclUnhandledCudaError, "cudaMalloc(" + std::to_string(size) + "): " + cudaGetErrorString(status));
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclMemFree(void* ptr) {
  return guarded("ncclMemFree", nullptr, [&] {
    if (const auto* real = loom::nccl::realNccl(); real != nullptr && real->ncclMemFree != nullptr) {
      return real->ncclMemFree(ptr);
    }
    const cudaError_t status = cudaFree(ptr);
    if (status != cudaSuccess)
      throw Failure(ncclUnhandledCudaError, std::string("cudaFree: ") + cudaGetErrorString(status));
    return ncclSuccess;
  });
}

// Custom operators are the real NCCL's: the values it returns are passed through, and a call that
// names one is forwarded (dispatch.cc).
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  return guarded("ncclRedOpCreatePreMulSum", comm, [&] {
    ncclComm& self = need(comm);
    if (op == nullptr) throw Failure(ncclInvalidArgument, "op: null");
    ncclComm_t real = realCommFor(self, "ncclRedOpCreatePreMulSum (custom operators)");
    loom::nccl::checkReal(self, self.real->ncclRedOpCreatePreMulSum(op, scalar, datatype, residence, real),
                          "ncclRedOpCreatePreMulSum");
    return ncclSuccess;
  });
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guarded("ncclRedOpDestroy", comm, [&] {
    ncclComm& self = need(comm);
    ncclComm_t real = realCommFor(self, "ncclRedOpDestroy (custom operators)");
    loom::nccl::checkReal(self, self.real->ncclRedOpDestroy(op, real), "ncclRedOpDestroy");
    return ncclSuccess;
  });
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclAllReduce", comm, [&] {
    PendingCall call = makeCall(Call::kAllReduce, count, datatype, comm, stream);
    checkOp(op);
    checkBuffer(sendbuff, count, "sendbuff");
    checkBuffer(recvbuff, count, "recvbuff");
    call.info.op = op;
    return runWithBuffers(comm, call, sendbuff, recvbuff);
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclAllGather", comm, [&] {
    PendingCall call = makeCall(Call::kAllGather, sendcount, datatype, comm, stream);
    checkBuffer(sendbuff, sendcount, "sendbuff");
    checkBuffer(recvbuff, sendcount, "recvbuff");
    const uint64_t bytes = sendcount * loom::nccl::ncclTypeBytes(datatype);
    call.info.inplace = sendbuff == byteOffset(recvbuff, uint64_t(comm->rank) * bytes);
    call.send = sendbuff;
    call.recv = recvbuff;
    return loom::nccl::run(comm, call);
  });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclReduceScatter", comm, [&] {
    PendingCall call = makeCall(Call::kReduceScatter, recvcount, datatype, comm, stream);
    checkOp(op);
    checkBuffer(sendbuff, recvcount, "sendbuff");
    checkBuffer(recvbuff, recvcount, "recvbuff");
    const uint64_t bytes = recvcount * loom::nccl::ncclTypeBytes(datatype);
    call.info.op = op;
    call.info.inplace = recvbuff == byteOffset(sendbuff, uint64_t(comm->rank) * bytes);
    call.send = sendbuff;
    call.recv = recvbuff;
    return loom::nccl::run(comm, call);
  });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclBroadcast", comm, [&] {
    PendingCall call = makeCall(Call::kBroadcast, count, datatype, comm, stream);
    checkRank(root, *comm, "root");
    if (comm->rank == root) checkBuffer(sendbuff, count, "sendbuff");
    checkBuffer(recvbuff, count, "recvbuff");
    call.info.root = root;
    return runWithBuffers(comm, call, sendbuff, recvbuff);
  });
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclReduce", comm, [&] {
    PendingCall call = makeCall(Call::kReduce, count, datatype, comm, stream);
    checkOp(op);
    checkRank(root, *comm, "root");
    checkBuffer(sendbuff, count, "sendbuff");
    if (comm->rank == root) checkBuffer(recvbuff, count, "recvbuff");
    call.info.op = op;
    call.info.root = root;
    return runWithBuffers(comm, call, sendbuff, recvbuff);
  });
}

#ifdef LOOM_NCCL_HAS_NCCLALLTOALL
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                          cudaStream_t stream) {
  return guarded("ncclAlltoAll", comm, [&] {
    PendingCall call = makeCall(Call::kAllToAll, count, datatype, comm, stream);
    checkBuffer(sendbuff, count, "sendbuff");
    checkBuffer(recvbuff, count, "recvbuff");
    return runWithBuffers(comm, call, sendbuff, recvbuff);
  });
}
#endif

#ifdef LOOM_NCCL_HAS_NCCLGATHER
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclGather", comm, [&] {
    PendingCall call = makeCall(Call::kGather, count, datatype, comm, stream);
    checkRank(root, *comm, "root");
    checkBuffer(sendbuff, count, "sendbuff");
    if (comm->rank == root) checkBuffer(recvbuff, count, "recvbuff");
    call.info.root = root;
    return runWithBuffers(comm, call, sendbuff, recvbuff);
  });
}
#endif

#ifdef LOOM_NCCL_HAS_NCCLSCATTER
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclScatter", comm, [&] {
    PendingCall call = makeCall(Call::kScatter, count, datatype, comm, stream);
    checkRank(root, *comm, "root");
    if (comm->rank == root) checkBuffer(sendbuff, count, "sendbuff");
    checkBuffer(recvbuff, count, "recvbuff");
    call.info.root = root;
    return runWithBuffers(comm, call, sendbuff, recvbuff);
  });
}
#endif

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return guarded("ncclSend", comm, [&] {
    PendingCall call = makeCall(Call::kSend, count, datatype, comm, stream);
    checkRank(peer, *comm, "peer");
    checkBuffer(sendbuff, count, "sendbuff");
    call.info.toSelf = peer == comm->rank;
    call.send = sendbuff;
    call.peer = peer;
    return loom::nccl::run(comm, call);
  });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return guarded("ncclRecv", comm, [&] {
    PendingCall call = makeCall(Call::kRecv, count, datatype, comm, stream);
    checkRank(peer, *comm, "peer");
    checkBuffer(recvbuff, count, "recvbuff");
    call.info.toSelf = peer == comm->rank;
    call.recv = recvbuff;
    call.peer = peer;
    return loom::nccl::run(comm, call);
  });
}

ncclResult_t ncclGroupStart() { return guarded("ncclGroupStart", nullptr, loom::nccl::groupStart); }
ncclResult_t ncclGroupEnd() { return guarded("ncclGroupEnd", nullptr, loom::nccl::groupEnd); }
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return guarded("ncclGroupSimulateEnd", nullptr, [&] { return loom::nccl::groupSimulateEnd(simInfo); });
}

// The pnccl names, as NCCL defines them: the same functions under a second name.
#define LOOM_NCCL_PROFILING_ALIAS(name) decltype(name) p##name __attribute__((alias(#name)));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define LOOM_NCCL_API_FUNCTIONS(X)                                                                                \
  X(ncclGetVersion)                                                                                               \
  X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommInitRankConfig) X(ncclCommInitRankScalable) X(ncclCommInitAll) \
      X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommSplit) X(ncclGetErrorString)              \
          X(ncclGetLastError) X(ncclResetDebugInit) X(ncclCommGetAsyncError) X(ncclCommCount) X(ncclCommCuDevice) \
              X(ncclCommUserRank) X(ncclCommRegister) X(ncclCommDeregister) X(ncclMemAlloc) X(ncclMemFree)        \
                  X(ncclRedOpCreatePreMulSum) X(ncclRedOpDestroy) X(ncclAllReduce) X(ncclAllGather)               \
                      X(ncclReduceScatter) X(ncclBroadcast) X(ncclBcast) X(ncclReduce) X(ncclSend) X(ncclRecv)    \
                          X(ncclGroupStart) X(ncclGroupEnd) X(ncclGroupSimulateEnd)
LOOM_NCCL_API_FUNCTIONS(LOOM_NCCL_PROFILING_ALIAS)
#ifdef LOOM_NCCL_HAS_NCCLCOMMSHRINK
LOOM_NCCL_PROFILING_ALIAS(ncclCommShrink)
#endif
#ifdef LOOM_NCCL_HAS_NCCLCOMMREVOKE
LOOM_NCCL_PROFILING_ALIAS(ncclCommRevoke)
#endif
#ifdef LOOM_NCCL_HAS_NCCLCOMMWINDOWREGISTER
LOOM_NCCL_PROFILING_ALIAS(ncclCommWindowRegister)
LOOM_NCCL_PROFILING_ALIAS(ncclCommWindowDeregister)
#endif
#ifdef LOOM_NCCL_HAS_NCCLALLTOALL
LOOM_NCCL_PROFILING_ALIAS(ncclAlltoAll)
#endif
#ifdef LOOM_NCCL_HAS_NCCLGATHER
LOOM_NCCL_PROFILING_ALIAS(ncclGather)
#endif
#ifdef LOOM_NCCL_HAS_NCCLSCATTER
LOOM_NCCL_PROFILING_ALIAS(ncclScatter)
#endif
#pragma GCC diagnostic pop

}  // extern "C"
