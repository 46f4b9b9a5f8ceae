// A connection to a peer on the same host through CUDA IPC: the peer's registered device memory is
// mapped here, and the host drives the copy engine (cudaMemcpyAsync on a stream of its own), so a
// port channel over this connection costs the GPU no threads.

#include <chrono>
#include <thread>

#include "byte_io.hpp"
#include "connection_factory.hpp"
#include "deadline.hpp"
#include "gpu.hpp"
#include "host_identity.hpp"
#include "loom/error.hpp"

namespace loom {
namespace {

class CudaIpcConnection : public Connection {
 public:
  CudaIpcConnection(int localRank, int remoteRank, int device) : Connection(localRank, remoteRank), stream_(device) {}

  Transport transport() const override { return Transport::kCudaIpc; }

  void write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src, uint64_t srcOffset,
             uint64_t bytes) override {
    checkWrite(dst, dstOffset, src, srcOffset, bytes);
    if (bytes == 0) return;
    stream_.copyAsync(mapped(dst) + dstOffset, static_cast<uint8_t*>(src.data()) + srcOffset, bytes);
  }

  void writeValue(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) override {
    checkValue(dst, dstOffset);
    stream_.writeValueAsync(reinterpret_cast<uint64_t*>(mapped(dst) + dstOffset), value);
  }

  void flush(int64_t timeoutMs) override {
    Deadline deadline(timeoutMs);
    while (!stream_.idle()) {
      if (deadline.expired()) {
        throw Error(ErrorCategory::kTimeout, "cuda_ipc connection from rank " + std::to_string(localRank()) +
                                                 " to rank " + std::to_string(remoteRank()) +
                                                 ": flush: copies still running after " + std::to_string(timeoutMs) +
                                                 " ms");
      }
      std::this_thread::yield();
    }
  }

 private:
  uint8_t* mapped(const RegisteredMemory& dst) const {
    if (dst.data() == nullptr) {
      throw Error(ErrorCategory::kInvalidArgument, "cuda_ipc connection from rank " + std::to_string(localRank()) +
                                                       " to rank " + std::to_string(remoteRank()) +
                                                       ": dst is not mapped in this process");
    }
    return static_cast<uint8_t*>(dst.data());
  }

  gpu::Stream stream_;
};

}  // namespace

std::shared_ptr<Connection> connectCudaIpc(const ConnectionSetup& setup) {
  const std::string where = "cuda_ipc connection from rank " + std::to_string(setup.localRank) + " to rank " +
                            std::to_string(setup.remoteRank);
  if (setup.cudaDevice < 0) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": this rank has no CUDA device");
  }
  // Both ends confirm they share a host before either maps anything.
  ByteWriter hello;
  hello.put(hostHash()).put(int32_t(setup.cudaDevice));
  setup.bootstrap.send(setup.remoteRank, setup.tag, hello.take());
  Bootstrap::Bytes reply = setup.bootstrap.recv(setup.remoteRank, setup.tag);
  ByteReader in(reply, where);
  const uint64_t peerHost = in.get<uint64_t>();
  const int32_t peerDevice = in.get<int32_t>();
  in.finish();
  if (peerHost != hostHash()) throw Error(ErrorCategory::kInvalidArgument, where + ": the peer runs on another host");
  if (peerDevice < 0) throw Error(ErrorCategory::kInvalidArgument, where + ": the peer has no CUDA device");
  return std::make_shared<CudaIpcConnection>(setup.localRank, setup.remoteRank, setup.cudaDevice);
}

}  // namespace loom
