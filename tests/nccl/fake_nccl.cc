// A stand-in for the real NCCL, for the tests of libloom_nccl.so on machines without GPUs: it exports
// the nccl.h functions that forwarding reaches and records every call, one line each, in the file
// FAKE_NCCL_LOG ("<pid> <function> key=value ..."). It moves no data. FAKE_NCCL_FAIL_INIT_RANK=<r>
// makes rank r's init fail, as NCCL fails ranks that share a GPU.

#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

struct ncclComm {
  int rank;
  int nranks;
  std::string id;
};

namespace {

std::mutex logMutex;

void record(const std::string& line) {
  const char* path = std::getenv("FAKE_NCCL_LOG");
  if (path == nullptr) return;
  std::lock_guard<std::mutex> lock(logMutex);
  if (FILE* file = std::fopen(path, "a")) {
    std::fprintf(file, "%d %s\n", int(getpid()), line.c_str());
    std::fclose(file);
  }
}

std::string hex(const char* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[(uint8_t(bytes[i]) >> 4) & 15];
    out += digits[uint8_t(bytes[i]) & 15];
  }
  return out;
}

std::string common(ncclComm_t comm) { return comm != nullptr ? " rank=" + std::to_string(comm->rank) : " rank=?"; }

ncclResult_t init(const char* name, ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  const char* fail = std::getenv("FAKE_NCCL_FAIL_INIT_RANK");
  record(std::string(name) + " nranks=" + std::to_string(nranks) + " rank=" + std::to_string(rank) +
         " id=" + hex(id.internal, 16) + " blocking=" + (config ? std::to_string(config->blocking) : "none"));
  if (fail != nullptr && std::atoi(fail) == rank) {
    *comm = nullptr;
    return ncclInvalidUsage;
  }
  *comm = new ncclComm{rank, nranks, hex(id.internal, 16)};
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = 22800;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<int> serial{0};
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "FAKE%06d%05d", int(getpid()) % 1000000, serial++);
  record("ncclGetUniqueId id=" + hex(id->internal, 16));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  return init("ncclCommInitRankConfig", comm, nranks, id, rank, config);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return init("ncclCommInitRank", comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int, ncclUniqueId* ids,
                                      ncclConfig_t* config) {
  return init("ncclCommInitRankScalable", comm, nranks, ids[0], rank, config);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  record("ncclCommFinalize" + common(comm));
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  record("ncclCommDestroy" + common(comm));
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  record("ncclCommAbort" + common(comm));
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  record("ncclCommSplit" + common(comm) + " color=" + std::to_string(color) + " key=" + std::to_string(key) +
         " blocking=" + (config ? std::to_string(config->blocking) : "none"));
  *newcomm = color == NCCL_SPLIT_NOCOLOR ? nullptr : new ncclComm{0, 1, comm->id + "-split"};
  return ncclSuccess;
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t*, int shrinkFlags) {
  std::string excluded;
  for (int i = 0; i < excludeRanksCount; ++i) excluded += (i ? "," : "") + std::to_string(excludeRanksList[i]);
  record("ncclCommShrink" + common(comm) + " excluded=" + excluded + " flags=" + std::to_string(shrinkFlags));
  *newcomm = new ncclComm{0, 1, comm->id + "-shrink"};
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t) { return "fake error string"; }
const char* ncclGetLastError(ncclComm_t) { return "fake last error"; }

ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* error) {
  *error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t, int* device) {
  *device = 0;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void*, size_t size, void** handle) {
  record("ncclCommRegister" + common(comm) + " size=" + std::to_string(size));
  *handle = reinterpret_cast<void*>(0x1234);
  return ncclSuccess;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  record("ncclCommDeregister" + common(comm) + " handle=" + std::to_string(reinterpret_cast<uintptr_t>(handle)));
  return ncclSuccess;
}

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  *ptr = std::malloc(size);
  record("ncclMemAlloc size=" + std::to_string(size));
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void* ptr) {
  std::free(ptr);
  record("ncclMemFree");
  return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t comm) {
  *op = ncclRedOp_t(ncclNumOps);
  record("ncclRedOpCreatePreMulSum" + common(comm));
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  record("ncclRedOpDestroy" + common(comm) + " op=" + std::to_string(int(op)));
  return ncclSuccess;
}

#define FAKE_COLLECTIVE_ARGS(count, type) " count=" + std::to_string(count) + " type=" + std::to_string(int(type))

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  record("ncclAllReduce" + common(comm) + FAKE_COLLECTIVE_ARGS(count, type) + " op=" + std::to_string(int(op)) +
         " inplace=" + std::to_string(send == recv));
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void*, void*, size_t count, ncclDataType_t type, ncclComm_t comm, cudaStream_t) {
  record("ncclAllGather" + common(comm) + FAKE_COLLECTIVE_ARGS(count, type));
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void*, void*, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t) {
  record("ncclReduceScatter" + common(comm) + FAKE_COLLECTIVE_ARGS(count, type) + " op=" + std::to_string(int(op)));
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void*, void*, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t) {
  record("ncclBroadcast" + common(comm) + FAKE_COLLECTIVE_ARGS(count, type) + " root=" + std::to_string(root));
  return ncclSuccess;
}

ncclResult_t ncclReduce(const void*, void*, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t) {
  record("ncclReduce" + common(comm) + FAKE_COLLECTIVE_ARGS(count, type) + " op=" + std::to_string(int(op)) +
         " root=" + std::to_string(root));
  return ncclSuccess;
}

ncclResult_t ncclSend(const void*, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  record("ncclSend" + common(comm) + FAKE_COLLECTIVE_ARGS(count, type) + " peer=" + std::to_string(peer));
  return ncclSuccess;
}

ncclResult_t ncclRecv(void*, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  record("ncclRecv" + common(comm) + FAKE_COLLECTIVE_ARGS(count, type) + " peer=" + std::to_string(peer));
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  record("ncclGroupStart");
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  record("ncclGroupEnd");
  return ncclSuccess;
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  record("ncclGroupSimulateEnd");
  info->estimatedTime = 1.0f;
  return ncclSuccess;
}

}  // extern "C"
