// A program written against nccl.h, linked with libloom_nccl.so as an application links with NCCL,
// that tests/nccl/test_nccl_library.py drives on the CPU backend (LOOM_NCCL_CPU_BACKEND=1: host
// buffers, no stream). Ranks are threads of this process or separate processes:
//   nccl_driver threads N STEPS         N ranks as threads (the id is made here)
//   nccl_driver initall N STEPS         ncclCommInitAll; each step runs on every rank in one group
//   nccl_driver root N STEPS            rank 0 of N: prints "id HEX", then joins
//   nccl_driver rank HEX R N STEPS      rank R of N, with rank 0's id
//   nccl_driver id                      prints the unique id's hex and exits (it never gets a rank 0)
// STEPS: ';'-separated, each "name:arg:arg..." (see runStep), "rN@name:..." for rank N only
// (threads, root, rank). "enter:COLORS[:KEYS]" splits (one color and key per rank, comma-separated, "n"
// for NCCL_SPLIT_NOCOLOR) and "shrink:RANKS" leaves ranks out; the steps after them run on the child
// (ranks in no child skip them) until "leave" destroys it ("abort": ncclCommAbort). Every step prints one line:
//   "rank R STEP -> ncclResultName" (+ " | last error") and, for steps with "check", "check ok" or
//   "check FAILED ...". The exit status is 0 when every line printed.

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

std::mutex outputMutex;

void say(const std::string& line) {
  std::lock_guard<std::mutex> lock(outputMutex);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

const char* resultName(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "unknown";
  }
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, separator)) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

ncclDataType_t typeOf(const std::string& name) {
  if (name == "float32") return ncclFloat32;
  if (name == "int32") return ncclInt32;
  if (name == "float64") return ncclFloat64;
  if (name == "int64") return ncclInt64;
  if (name == "int8") return ncclInt8;
  if (name == "float16") return ncclFloat16;
  if (name == "bad") return ncclDataType_t(99);
  std::fprintf(stderr, "unknown type %s\n", name.c_str());
  std::exit(2);
}

ncclRedOp_t opOf(const std::string& name) {
  if (name == "sum") return ncclSum;
  if (name == "prod") return ncclProd;
  if (name == "max") return ncclMax;
  if (name == "min") return ncclMin;
  if (name == "avg") return ncclAvg;
  std::fprintf(stderr, "unknown op %s\n", name.c_str());
  std::exit(2);
}

size_t typeBytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return 1;
    case ncclFloat16:
      return 2;
    case ncclFloat64:
    case ncclInt64:
      return 8;
    default:
      return 4;
  }
}

// Values as float32 or int32 elements (exact in both); other types are run, not checked.
struct Buffer {
  std::vector<uint8_t> bytes;
  ncclDataType_t type;
  Buffer(size_t count, ncclDataType_t t) : bytes(std::max<size_t>(count, 1) * typeBytes(t)), type(t) {}
  void set(size_t i, double value) {
    if (type == ncclFloat32) reinterpret_cast<float*>(bytes.data())[i] = float(value);
    if (type == ncclInt32) reinterpret_cast<int32_t*>(bytes.data())[i] = int32_t(value);
  }
  double get(size_t i) const {
    if (type == ncclFloat32) return reinterpret_cast<const float*>(bytes.data())[i];
    if (type == ncclInt32) return reinterpret_cast<const int32_t*>(bytes.data())[i];
    return 0;
  }
  void* at(size_t element) { return bytes.data() + element * typeBytes(type); }
};

struct Rank {
  ncclComm_t comm = nullptr;
  int rank = 0;  // in `comm`
  int size = 1;
  int worldRank = 0;   // in the first communicator: what reports name
  bool active = true;  // false while this rank is in no communicator of a split (until "leave")
  struct Level {
    ncclComm_t comm;
    int rank, size;
  };
  std::vector<Level> parents;  // the communicators "enter" and "shrink" left, innermost last

  // After a split or shrink has connected (at ncclGroupEnd inside a group): the child's rank and size.
  void settle() {
    active = comm != nullptr;
    if (!active) return;
    ncclCommUserRank(comm, &rank);
    ncclCommCount(comm, &size);
  }
};

// "0,1,n,1": one value per rank, "n" for NCCL_SPLIT_NOCOLOR.
int pick(const std::string& list, int rank) {
  const std::vector<std::string> values = split(list, ',');
  const std::string& value = values.at(size_t(rank));
  return value == "n" ? NCCL_SPLIT_NOCOLOR : std::stoi(value);
}

// Expectations are noted when a step is issued and compared when it is reported: inside a group
// the data arrives at ncclGroupEnd.
struct Check {
  struct Expected {
    const Buffer* buffer;
    size_t index;
    double value;
  };
  bool wanted = false;
  std::vector<Expected> expected;
  void expect(const Buffer& buffer, size_t offset, size_t i, double value) {
    if (wanted) expected.push_back({&buffer, offset + i, value});
  }
  std::string failure() const {
    for (const Expected& e : expected) {
      const double seen = e.buffer->get(e.index);
      if (seen != e.value) {
        return "element " + std::to_string(e.index) + ": expected " + std::to_string(e.value) + ", saw " +
               std::to_string(seen);
      }
    }
    return "";
  }
};

bool has(const std::vector<std::string>& args, const char* flag) {
  for (const auto& arg : args) {
    if (arg == flag) return true;
  }
  return false;
}

double sumOf(int size) { return size * (size + 1) / 2.0; }

// One step on one rank; `keep` holds its buffers until the end (a group may still use them).
ncclResult_t runStep(Rank& me, const std::vector<std::string>& args, Check& check, std::vector<Buffer>& keep) {
  const std::string& name = args[0];
  check.wanted = has(args, "check");
  const bool inplace = has(args, "ip");
  const int r = me.rank, n = me.size;
  auto count = [&] { return size_t(std::stoull(args.at(1))); };
  if (name == "allreduce") {
    const size_t c = count();
    const ncclDataType_t type = typeOf(args.at(2));
    const ncclRedOp_t op = opOf(args.at(3));
    Buffer& send = keep.emplace_back(c, type);
    Buffer& recv = inplace ? send : keep.emplace_back(c, type);
    for (size_t i = 0; i < c; ++i) send.set(i, (r + 1) * double(i % 13 + 1));
    const ncclResult_t result = ncclAllReduce(send.at(0), recv.at(0), c, type, op, me.comm, nullptr);
    const double factor = op == ncclSum ? sumOf(n) : op == ncclMax ? n : op == ncclAvg ? sumOf(n) / n : 1;
    for (size_t i = 0; i < c; ++i) check.expect(recv, 0, i, factor * double(i % 13 + 1));
    return result;
  }
  if (name == "allgather") {
    const size_t c = count();
    const ncclDataType_t type = typeOf(args.at(2));
    Buffer& recv = keep.emplace_back(c * n, type);
    Buffer* send = inplace ? &recv : &keep.emplace_back(c, type);
    const size_t base = inplace ? size_t(r) * c : 0;
    for (size_t i = 0; i < c; ++i) send->set(base + i, r * 1000.0 + double(i % 1000));
    const ncclResult_t result = ncclAllGather(send->at(base), recv.at(0), c, type, me.comm, nullptr);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < c; ++i) check.expect(recv, size_t(p) * c, i, p * 1000.0 + double(i % 1000));
    }
    return result;
  }
  if (name == "reducescatter") {
    const size_t c = count();
    const ncclDataType_t type = typeOf(args.at(2));
    const ncclRedOp_t op = opOf(args.at(3));
    Buffer& send = keep.emplace_back(c * n, type);
    for (size_t j = 0; j < c * n; ++j) send.set(j, (r + 1) * double(j % 13 + 1));
    Buffer* recv = inplace ? &send : &keep.emplace_back(c, type);
    const size_t base = inplace ? size_t(r) * c : 0;
    const ncclResult_t result = ncclReduceScatter(send.at(0), recv->at(base), c, type, op, me.comm, nullptr);
    const double factor = op == ncclAvg ? sumOf(n) / n : sumOf(n);
    for (size_t i = 0; i < c; ++i) check.expect(*recv, base, i, factor * double((size_t(r) * c + i) % 13 + 1));
    return result;
  }
  if (name == "broadcast" || name == "bcast") {
    const size_t c = count();
    const ncclDataType_t type = typeOf(args.at(2));
    const int root = std::stoi(args.at(3));
    Buffer& send = keep.emplace_back(c, type);
    Buffer& recv = inplace || name == "bcast" ? send : keep.emplace_back(c, type);
    if (r == root) {
      for (size_t i = 0; i < c; ++i) send.set(i, 7.0 + double(i % 11));
    }
    const ncclResult_t result = name == "bcast"
                                    ? ncclBcast(send.at(0), c, type, root, me.comm, nullptr)
                                    : ncclBroadcast(send.at(0), recv.at(0), c, type, root, me.comm, nullptr);
    for (size_t i = 0; i < c; ++i) check.expect(recv, 0, i, 7.0 + double(i % 11));
    return result;
  }
  if (name == "reduce") {
    // reduce:COUNT:TYPE:OP:ROOT[:ip][:null]: "null" has the non-root ranks pass recvbuff = nullptr, as
    // NCCL allows; without it their recvbuff holds -5 and must keep it.
    const size_t c = count();
    const ncclDataType_t type = typeOf(args.at(2));
    const ncclRedOp_t op = opOf(args.at(3));
    const int root = std::stoi(args.at(4));
    Buffer& send = keep.emplace_back(c, type);
    Buffer& recv = inplace ? send : keep.emplace_back(c, type);
    for (size_t i = 0; i < c; ++i) send.set(i, (r + 1) * double(i % 13 + 1));
    if (!inplace) {
      for (size_t i = 0; i < c; ++i) recv.set(i, -5.0);
    }
    void* recvbuff = r != root && has(args, "null") ? nullptr : recv.at(0);
    const ncclResult_t result = ncclReduce(send.at(0), recvbuff, c, type, op, root, me.comm, nullptr);
    const double factor = op == ncclSum ? sumOf(n) : op == ncclMax ? n : op == ncclAvg ? sumOf(n) / n : 1;
    for (size_t i = 0; i < c; ++i) {
      // The root gets the reduction; elsewhere recvbuff is untouched (in place: the rank's own input).
      const double element = double(i % 13 + 1);
      check.expect(recv, 0, i, r == root ? factor * element : inplace ? (r + 1) * element : -5.0);
      check.expect(send, 0, i, r == root && inplace ? factor * element : (r + 1) * element);
    }
    return result;
  }
#ifdef LOOM_NCCL_HAS_NCCLALLTOALL
  if (name == "alltoall") {
    const size_t c = count();
    const ncclDataType_t type = typeOf(args.at(2));
    Buffer& send = keep.emplace_back(c * n, type);
    Buffer& recv = keep.emplace_back(c * n, type);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < c; ++i) send.set(size_t(p) * c + i, r * 100.0 + p);
    }
    const ncclResult_t result = ncclAlltoAll(send.at(0), recv.at(0), c, type, me.comm, nullptr);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < c; ++i) check.expect(recv, size_t(p) * c, i, p * 100.0 + r);
    }
    return result;
  }
#endif
#if defined(LOOM_NCCL_HAS_NCCLGATHER) && defined(LOOM_NCCL_HAS_NCCLSCATTER)
  if (name == "gather" || name == "scatter") {
    // gather:COUNT:TYPE:ROOT: rank p's piece holds p * 100 + i % 17. scatter:COUNT:TYPE:ROOT: the root's
    // piece for rank p holds the same, which rank p receives.
    const size_t c = count();
    const ncclDataType_t type = typeOf(args.at(2));
    const int root = std::stoi(args.at(3));
    Buffer& whole = keep.emplace_back(c * n, type);
    Buffer& piece = keep.emplace_back(c, type);
    auto value = [&](int p, size_t i) { return p * 100.0 + double(i % 17); };
    if (name == "gather") {
      for (size_t i = 0; i < c; ++i) piece.set(i, value(r, i));
      const ncclResult_t result = ncclGather(piece.at(0), whole.at(0), c, type, root, me.comm, nullptr);
      for (int p = 0; p < n && r == root; ++p) {
        for (size_t i = 0; i < c; ++i) check.expect(whole, size_t(p) * c, i, value(p, i));
      }
      return result;
    }
    for (int p = 0; p < n && r == root; ++p) {
      for (size_t i = 0; i < c; ++i) whole.set(size_t(p) * c + i, value(p, i));
    }
    const ncclResult_t result = ncclScatter(whole.at(0), piece.at(0), c, type, root, me.comm, nullptr);
    for (size_t i = 0; i < c; ++i) check.expect(piece, 0, i, value(r, i));
    return result;
  }
#endif
  if (name == "send" || name == "recv") {
    const size_t c = count();
    const ncclDataType_t type = typeOf(args.at(2));
    const int peer = std::stoi(args.at(3));
    Buffer& buffer = keep.emplace_back(c, type);
    // The values depend on the count too, so that messages paired in the wrong order differ.
    auto value = [&](size_t i) { return 42.0 + double(i % 5) + 10.0 * double(c % 7); };
    if (name == "send") {
      for (size_t i = 0; i < c; ++i) buffer.set(i, value(i));
      return ncclSend(buffer.at(0), c, type, peer, me.comm, nullptr);
    }
    const ncclResult_t result = ncclRecv(buffer.at(0), c, type, peer, me.comm, nullptr);
    for (size_t i = 0; i < c; ++i) check.expect(buffer, 0, i, value(i));
    return result;
  }
  if (name == "inplace") {
    // inplace:COUNT:TYPE:TO:FROM: one group sends a buffer to TO and receives FROM's into the same buffer
    // (nccl-tests' sendrecv in place); rank p's buffer holds p * 1000 + i % 13.
    const size_t c = count();
    const ncclDataType_t type = typeOf(args.at(2));
    const int to = std::stoi(args.at(3)), from = std::stoi(args.at(4));
    Buffer& buffer = keep.emplace_back(c, type);
    for (size_t i = 0; i < c; ++i) buffer.set(i, r * 1000.0 + double(i % 13));
    ncclResult_t result = ncclGroupStart();
    if (result == ncclSuccess) result = ncclSend(buffer.at(0), c, type, to, me.comm, nullptr);
    if (result == ncclSuccess) result = ncclRecv(buffer.at(0), c, type, from, me.comm, nullptr);
    const ncclResult_t ended = ncclGroupEnd();
    for (size_t i = 0; i < c; ++i) check.expect(buffer, 0, i, from * 1000.0 + double(i % 13));
    return result != ncclSuccess ? result : ended;
  }
  if (name == "inplaceself") {
    // inplaceself:COUNT:TYPE:PEER: one group exchanges buffer A with PEER in place and sends buffer B to this
    // rank itself in place too: both staged sends share the scratch, and each must keep its own bytes.
    const size_t c = count();
    const ncclDataType_t type = typeOf(args.at(2));
    const int peer = std::stoi(args.at(3));
    Buffer& a = keep.emplace_back(c, type);
    Buffer& b = keep.emplace_back(c, type);
    for (size_t i = 0; i < c; ++i) {
      a.set(i, r * 1000.0 + double(i % 13));
      b.set(i, r * 1000.0 + 500.0 + double(i % 11));
    }
    ncclResult_t result = ncclGroupStart();
    if (result == ncclSuccess) result = ncclSend(b.at(0), c, type, r, me.comm, nullptr);
    if (result == ncclSuccess) result = ncclRecv(b.at(0), c, type, r, me.comm, nullptr);
    if (result == ncclSuccess) result = ncclSend(a.at(0), c, type, peer, me.comm, nullptr);
    if (result == ncclSuccess) result = ncclRecv(a.at(0), c, type, peer, me.comm, nullptr);
    const ncclResult_t ended = ncclGroupEnd();
    for (size_t i = 0; i < c; ++i) {
      check.expect(a, 0, i, peer * 1000.0 + double(i % 13));
      check.expect(b, 0, i, r * 1000.0 + 500.0 + double(i % 11));
    }
    return result != ncclSuccess ? result : ended;
  }
  if (name == "group") return ncclGroupStart();
  if (name == "end") return ncclGroupEnd();
  if (name == "split") {
    ncclComm_t child = nullptr;
    const ncclResult_t result = ncclCommSplit(me.comm, std::stoi(args.at(1)), me.rank, &child, nullptr);
    if (result == ncclSuccess && child != nullptr) {
      int childRank = -1, childSize = -1;
      ncclCommUserRank(child, &childRank);
      ncclCommCount(child, &childSize);
      say("rank " + std::to_string(r) + " split child " + std::to_string(childRank) + "/" + std::to_string(childSize));
      float value = 1;
      const ncclResult_t forwarded = ncclAllReduce(&value, &value, 1, ncclFloat32, ncclSum, child, nullptr);
      say("rank " + std::to_string(r) + " split child allreduce -> " + resultName(forwarded));
      ncclCommDestroy(child);
    }
    return result;
  }
  if (name == "enter") {
    // enter:COLORS[:KEYS]: split by the color (and key, default the rank) listed for this rank; the
    // steps that follow run on the child until "leave".
    const int color = pick(args.at(1), r);
    const int key = args.size() > 2 && args[2] != "check" ? pick(args[2], r) : r;
    me.parents.push_back({me.comm, r, n});
    return ncclCommSplit(me.parents.back().comm, color, key, &me.comm, nullptr);
  }
#ifdef LOOM_NCCL_HAS_NCCLCOMMSHRINK
  if (name == "shrink") {
    // shrink:R,R...: the listed ranks are left out (and call nothing); the rest run on the child.
    std::vector<int> excluded;
    for (const std::string& value : split(args.at(1), ',')) excluded.push_back(std::stoi(value));
    me.parents.push_back({me.comm, r, n});
    if (std::find(excluded.begin(), excluded.end(), r) != excluded.end()) {
      me.comm = nullptr;
      return ncclSuccess;
    }
    return ncclCommShrink(me.parents.back().comm, excluded.data(), int(excluded.size()), &me.comm, nullptr, 0);
  }
#endif
  if (name == "leave" || name == "abort") {
    ncclResult_t result = ncclSuccess;
    if (me.comm != nullptr) result = name == "abort" ? ncclCommAbort(me.comm) : ncclCommDestroy(me.comm);
    me.comm = me.parents.back().comm;
    me.rank = me.parents.back().rank;
    me.size = me.parents.back().size;
    me.parents.pop_back();
    me.active = true;
    return result;
  }
  if (name == "premulsum") {
    ncclRedOp_t op;
    float scalar = 0.5f;
    ncclResult_t result = ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, me.comm);
    if (result != ncclSuccess) return result;
    Buffer& buffer = keep.emplace_back(64, ncclFloat32);
    result = ncclAllReduce(buffer.at(0), buffer.at(0), 64, ncclFloat32, op, me.comm, nullptr);
    if (result != ncclSuccess) return result;
    return ncclRedOpDestroy(op, me.comm);
  }
  if (name == "register") {
    Buffer& buffer = keep.emplace_back(256, ncclFloat32);
    void* handle = nullptr;
    const ncclResult_t result = ncclCommRegister(me.comm, buffer.at(0), 1024, &handle);
    if (result != ncclSuccess) return result;
    return ncclCommDeregister(me.comm, handle);
  }
#ifdef NCCL_WIN_COLL_SYMMETRIC
  if (name == "window") {
    // window:COUNT:CALLS[:FLAGS]: a window of CALLS all-gathers of COUNT float32 elements, input and output
    // back to back at a new place each call (the same on every rank), registered with FLAGS (default
    // NCCL_WIN_COLL_SYMMETRIC); each call's output checked; then deregistered.
    const size_t c = count(), calls = size_t(std::stoull(args.at(2)));
    const int flags = args.size() > 3 && args[3] != "check" ? std::stoi(args[3]) : NCCL_WIN_COLL_SYMMETRIC;
    const size_t slot = c * size_t(n + 1);  // one call's input and output
    Buffer& window = keep.emplace_back(slot * calls, ncclFloat32);
    ncclWindow_t handle = nullptr;
    ncclResult_t result = ncclCommWindowRegister(me.comm, window.at(0), window.bytes.size(), &handle, flags);
    for (size_t k = 0; k < calls && result == ncclSuccess; ++k) {
      const size_t at = slot * ((k * 7) % calls);  // places in a scrambled order
      for (size_t i = 0; i < c; ++i) window.set(at + i, 1000.0 * k + 10.0 * r + double(i % 97));
      result = ncclAllGather(window.at(at), window.at(at + c), c, ncclFloat32, me.comm, nullptr);
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < c; ++i)
          check.expect(window, at + c + size_t(q) * c, i, 1000.0 * k + 10.0 * q + double(i % 97));
      }
      if (result == ncclSuccess && check.wanted && !check.failure().empty()) return ncclInternalError;
    }
    const ncclResult_t deregistered = handle ? ncclCommWindowDeregister(me.comm, handle) : ncclSuccess;
    return result != ncclSuccess ? result : deregistered;
  }
#endif
  if (name == "die") {
    // die[:MS]: after MS milliseconds (default 0) this process is killed (SIGKILL: no destructor runs, the
    // connections close as the kernel drops them).
    if (args.size() > 1) std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(args[1])));
    std::raise(SIGKILL);
  }
  if (name == "exit") {
    // exit: this process ends normally (std::exit: atexit handlers run) with its communicators still open,
    // as a torch job that never destroys its process group.
    std::fflush(stdout);
    std::exit(0);
  }
  if (name == "watch") {
    // watch:MS: asks ncclCommGetAsyncError every 10 ms, as torch's watchdog does, until it reports an error or
    // MS pass; prints what it reported and after how long.
    const auto start = std::chrono::steady_clock::now();
    const auto limit = start + std::chrono::milliseconds(std::stoi(args.at(1)));
    ncclResult_t async = ncclSuccess;
    ncclResult_t result = ncclSuccess;
    while (result == ncclSuccess && async == ncclSuccess && std::chrono::steady_clock::now() < limit) {
      result = ncclCommGetAsyncError(me.comm, &async);
      if (async == ncclSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    say("rank " + std::to_string(r) + " watch async=" + resultName(async) + " after " + std::to_string(waited) +
        " ms | " + ncclGetLastError(me.comm));
    return result;
  }
  if (name == "query") {
    int count = -1, rank = -1, device = -2;
    ncclResult_t async = ncclInternalError;
    ncclCommCount(me.comm, &count);
    ncclCommUserRank(me.comm, &rank);
    ncclCommCuDevice(me.comm, &device);
    const ncclResult_t result = ncclCommGetAsyncError(me.comm, &async);
    say("rank " + std::to_string(r) + " query count=" + std::to_string(count) + " rank=" + std::to_string(rank) +
        " device=" + std::to_string(device) + " async=" + resultName(async));
    return result;
  }
  if (name == "finalize") return ncclCommFinalize(me.comm);
  std::fprintf(stderr, "unknown step %s\n", name.c_str());
  std::exit(2);
}

void report(const Rank& me, const std::string& step, ncclResult_t result, const Check& check) {
  std::string line = "rank " + std::to_string(me.worldRank) + " " + step + " -> " + resultName(result);
  if (result != ncclSuccess) line += std::string(" | ") + ncclGetLastError(me.comm);
  if (check.wanted && result == ncclSuccess) {
    const std::string failure = check.failure();
    line += failure.empty() ? " check ok" : " check FAILED " + failure;
  }
  say(line);
}

bool entersChild(const std::string& step) { return step.rfind("enter:", 0) == 0 || step.rfind("shrink:", 0) == 0; }

// A rank outside every communicator of a split takes no step until "leave".
bool takes(const Rank& me, const std::string& step) { return me.active || step == "leave" || step == "abort"; }

void reportChild(const Rank& me) {
  say("rank " + std::to_string(me.worldRank) +
      (me.active ? " child " + std::to_string(me.rank) + "/" + std::to_string(me.size) : std::string(" child none")));
}

void runSteps(Rank& me, const std::string& steps) {
  std::vector<Buffer> keep;
  keep.reserve(4096);  // buffers must not move while a group holds their addresses
  struct Done {
    std::string step;
    ncclResult_t result;
    Check check;
  };
  std::vector<Done> pending;  // inside a group, reported after its end (when the data is there)
  int depth = 0;
  for (std::string step : split(steps, ';')) {
    // "rN@step": only rank N takes this step.
    const size_t at = step.find('@');
    if (at != std::string::npos) {
      if (std::stoi(step.substr(1, at - 1)) != me.rank) continue;
      step = step.substr(at + 1);
    }
    if (!takes(me, step)) continue;
    Check check;
    const std::vector<std::string> args = split(step, ':');
    const ncclResult_t result = runStep(me, args, check, keep);
    if (args[0] == "group") ++depth;
    if (args[0] == "end") --depth;
    pending.push_back(Done{step, result, check});
    if (depth > 0) continue;
    for (const Done& done : pending) {
      report(me, done.step, done.result, done.check);
      if (entersChild(done.step) && done.result == ncclSuccess) {
        me.settle();
        reportChild(me);
      }
    }
    pending.clear();
  }
  for (const Done& done : pending) report(me, done.step, done.result, done.check);
}

void runRank(const ncclUniqueId& id, int rank, int size, const std::string& steps) {
  Rank me;
  me.rank = rank;
  me.size = size;
  me.worldRank = rank;
  const ncclResult_t init = ncclCommInitRank(&me.comm, size, id, rank);
  say("rank " + std::to_string(rank) + " init -> " + resultName(init) +
      (init == ncclSuccess ? std::string() : std::string(" | ") + ncclGetLastError(nullptr)));
  if (init != ncclSuccess) return;
  runSteps(me, steps);
  const ncclResult_t destroy = ncclCommDestroy(me.comm);
  say("rank " + std::to_string(rank) + " destroy -> " + resultName(destroy));
}

std::string hexOf(const ncclUniqueId& id) {
  std::string out;
  char digits[3];
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    std::snprintf(digits, sizeof(digits), "%02x", uint8_t(id.internal[i]));
    out += digits;
  }
  return out;
}

ncclUniqueId idOf(const std::string& hex) {
  ncclUniqueId id;
  std::memset(id.internal, 0, sizeof(id.internal));
  for (size_t i = 0; i < sizeof(id.internal) && 2 * i + 1 < hex.size(); ++i) {
    id.internal[i] = char(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return id;
}

// ncclCommInitAll, then each step on every rank of this thread inside one group.
int runAll(int size, const std::string& steps) {
  std::vector<ncclComm_t> comms(size_t(size), nullptr);
  const ncclResult_t init = ncclCommInitAll(comms.data(), size, nullptr);
  say(std::string("initall -> ") + resultName(init) +
      (init == ncclSuccess ? "" : std::string(" | ") + ncclGetLastError(nullptr)));
  if (init != ncclSuccess) return 0;
  std::vector<Rank> ranks(static_cast<size_t>(size));
  std::vector<std::vector<Buffer>> keep(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    ranks[size_t(r)].comm = comms[size_t(r)];
    ranks[size_t(r)].rank = ranks[size_t(r)].worldRank = r;
    ranks[size_t(r)].size = size;
    keep[size_t(r)].reserve(4096);
  }
  for (const std::string& step : split(steps, ';')) {
    std::vector<Check> checks(static_cast<size_t>(size));
    std::vector<ncclResult_t> results(static_cast<size_t>(size));
    std::vector<bool> took(static_cast<size_t>(size));
    ncclGroupStart();
    for (int r = 0; r < size; ++r) {
      took[size_t(r)] = takes(ranks[size_t(r)], step);
      if (took[size_t(r)])
        results[size_t(r)] = runStep(ranks[size_t(r)], split(step, ':'), checks[size_t(r)], keep[size_t(r)]);
    }
    const ncclResult_t end = ncclGroupEnd();
    say("group end -> " + std::string(resultName(end)));
    for (int r = 0; r < size; ++r) {
      if (!took[size_t(r)]) continue;
      report(ranks[size_t(r)], step, results[size_t(r)], checks[size_t(r)]);
      if (entersChild(step) && results[size_t(r)] == ncclSuccess) {
        ranks[size_t(r)].settle();
        reportChild(ranks[size_t(r)]);
      }
    }
  }
  for (ncclComm_t comm : comms) ncclCommDestroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "id" && argc == 2) {
    ncclUniqueId id;
    const ncclResult_t result = ncclGetUniqueId(&id);
    say(std::string("id ") + (result == ncclSuccess ? hexOf(id) : resultName(result)));
    return 0;
  }
  if (mode == "threads" && argc == 4) {
    const int size = std::atoi(argv[2]);
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) threads.emplace_back(runRank, id, r, size, std::string(argv[3]));
    for (auto& thread : threads) thread.join();
    return 0;
  }
  if (mode == "initall" && argc == 4) return runAll(std::atoi(argv[2]), argv[3]);
  if (mode == "root" && argc == 4) {
    ncclUniqueId id;
    const ncclResult_t result = ncclGetUniqueId(&id);
    say(std::string("id ") + (result == ncclSuccess ? hexOf(id) : resultName(result)));
    runRank(id, 0, std::atoi(argv[2]), argv[3]);
    return 0;
  }
  if (mode == "rank" && argc == 6) {
    runRank(idOf(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), argv[5]);
    return 0;
  }
  std::fprintf(stderr, "usage: see the comment at the top of tests/nccl/nccl_driver.cc\n");
  return 2;
}
