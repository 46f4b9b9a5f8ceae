#pragma once

// The real NCCL, opened with dlopen: LOOM_NCCL_LIBRARY names it (a path, or "none" for no
// forwarding); otherwise the first libnccl.so.2 the dynamic loader finds that is not this library,
// then libnccl.so.2 in LD_LIBRARY_PATH's folders and the usual CUDA folders. A process opens one,
// once. Entry points the real library lacks (an older NCCL) stay null: calling one is an error.

#include <nccl.h>

#include <string>

namespace loom::nccl {

// Every function of nccl.h that a forwarded call may reach.
#define LOOM_REAL_NCCL_BASE(X)                                                                                    \
  X(ncclGetVersion)                                                                                               \
  X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommInitRank) X(ncclCommFinalize) X(ncclCommDestroy)         \
      X(ncclCommAbort) X(ncclCommSplit) X(ncclGetErrorString) X(ncclGetLastError) X(ncclCommGetAsyncError)        \
          X(ncclCommCount) X(ncclCommCuDevice) X(ncclCommUserRank) X(ncclCommRegister) X(ncclCommDeregister)      \
              X(ncclMemAlloc) X(ncclMemFree) X(ncclRedOpCreatePreMulSum) X(ncclRedOpDestroy) X(ncclReduce)        \
                  X(ncclBroadcast) X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather) X(ncclSend) X(ncclRecv) \
                      X(ncclGroupStart) X(ncclGroupEnd) X(ncclCommInitRankScalable) X(ncclGroupSimulateEnd)
// Entry points only some headers declare (executor/nccl/CMakeLists.txt finds which).
#ifdef LOOM_NCCL_HAS_NCCLCOMMREVOKE
#define LOOM_REAL_NCCL_REVOKE(X) X(ncclCommRevoke)
#else
#define LOOM_REAL_NCCL_REVOKE(X)
#endif
#ifdef LOOM_NCCL_HAS_NCCLCOMMSHRINK
#define LOOM_REAL_NCCL_SHRINK(X) X(ncclCommShrink)
#else
#define LOOM_REAL_NCCL_SHRINK(X)
#endif
#ifdef LOOM_NCCL_HAS_NCCLCOMMWINDOWREGISTER
#define LOOM_REAL_NCCL_WINDOWS(X) X(ncclCommWindowRegister) X(ncclCommWindowDeregister)
#else
#define LOOM_REAL_NCCL_WINDOWS(X)
#endif
#ifdef LOOM_NCCL_HAS_NCCLALLTOALL
#define LOOM_REAL_NCCL_ALLTOALL(X) X(ncclAlltoAll)
#else
#define LOOM_REAL_NCCL_ALLTOALL(X)
#endif
#ifdef LOOM_NCCL_HAS_NCCLGATHER
#define LOOM_REAL_NCCL_GATHER(X) X(ncclGather)
#else
#define LOOM_REAL_NCCL_GATHER(X)
#endif
#ifdef LOOM_NCCL_HAS_NCCLSCATTER
#define LOOM_REAL_NCCL_SCATTER(X) X(ncclScatter)
#else
#define LOOM_REAL_NCCL_SCATTER(X)
#endif
#define LOOM_REAL_NCCL_RECENT(X)                                                                                 \
  LOOM_REAL_NCCL_REVOKE(X) LOOM_REAL_NCCL_SHRINK(X) LOOM_REAL_NCCL_WINDOWS(X) LOOM_REAL_NCCL_ALLTOALL(X)          \
      LOOM_REAL_NCCL_GATHER(X) LOOM_REAL_NCCL_SCATTER(X)
#define LOOM_REAL_NCCL_FUNCTIONS(X) LOOM_REAL_NCCL_BASE(X) LOOM_REAL_NCCL_RECENT(X)

struct RealNccl {
#define LOOM_REAL_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
  LOOM_REAL_NCCL_FUNCTIONS(LOOM_REAL_NCCL_MEMBER)
#undef LOOM_REAL_NCCL_MEMBER
  std::string path;
  int version = 0;
};

// The real NCCL of this process, or nullptr with `whyNot` set (when given). The first call opens it
// (LOOM_NCCL_LIBRARY as it is then); later calls return the same answer at the cost of one load.
const RealNccl* realNccl(std::string* whyNot = nullptr);

}  // namespace loom::nccl
