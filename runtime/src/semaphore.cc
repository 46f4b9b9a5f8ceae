#include "loom/semaphore.hpp"

#include <vector>

#include "communicator_impl.hpp"
#include "gpu.hpp"
#include "loom/error.hpp"
#include "loom/gpu_buffer.hpp"
#include "loom/shared_host_memory.hpp"
#include "setup_tags.hpp"

namespace loom {

class SemaphoreTokens {
 public:
  // `peerMaps`: the peer stores into these words itself (a memory semaphore), so a peer in another
  // process of this host needs them in shared host memory.
  SemaphoreTokens(Communicator& communicator, TransportFlags transports, int peer, bool peerMaps) {
    if (communicator.cudaDevice() >= 0) {
      device_ = GpuBuffer(kBytes);
      words_ = static_cast<uint64_t*>(device_.data());
    } else if (peerMaps && communicator.sameNode(peer) && !communicator.sameProcess(peer)) {
      shared_ = SharedHostBuffer(kBytes);
      words_ = static_cast<uint64_t*>(shared_.data());
    } else {
      host_.assign(kBytes / 8, 0);
      words_ = host_.data();
    }
    registration_ = communicator.registerMemory(words_, kBytes, transports);
  }
  uint64_t* inbound() const { return words_; }
  uint64_t* expected() const { return words_ + 1; }
  const RegisteredMemory& registration() const { return registration_; }

 private:
  // Inbound and expected share one allocation; a peer sees only the first word used.
  static constexpr uint64_t kBytes = 16;
  GpuBuffer device_;
  SharedHostBuffer shared_;
  std::vector<uint64_t> host_;
  uint64_t* words_ = nullptr;
  RegisteredMemory registration_;
};

namespace {

// Both sides send their tokens' registration and take the peer's, on the semaphore's own tag.
RegisteredMemory exchangeTokens(Communicator& communicator, int peer, uint64_t tag, const SemaphoreTokens& tokens) {
  const uint64_t wireTag = setupTag(SetupPurpose::kSemaphore, tag, "semaphore");
  Communicator::Impl& impl = communicator.impl();
  impl.sendMemoryOn(tokens.registration(), peer, wireTag, wireTag);
  return impl.recvMemoryOn(peer, wireTag, wireTag);
}

}  // namespace

MemorySemaphore::MemorySemaphore(Communicator& communicator, int peer, uint64_t tag) : peer_(peer) {
  const std::string where =
      "memory semaphore between ranks " + std::to_string(communicator.rank()) + " and " + std::to_string(peer);
  if (peer < 0 || peer >= communicator.worldSize() || peer == communicator.rank()) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": the peer is not another rank");
  }
  if (!communicator.sameNode(peer)) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": the ranks run on different hosts (use a port channel)");
  }
  // Device tokens are mapped through CUDA IPC; host tokens need no mapping between threads of one
  // process and are shared host memory between processes; the TCP flag only marks them registered.
  const TransportFlags transports =
      communicator.cudaDevice() >= 0 ? TransportFlags(Transport::kCudaIpc) : TransportFlags(Transport::kTcp);
  tokens_ = std::make_unique<SemaphoreTokens>(communicator, transports, peer, true);
  remote_ = exchangeTokens(communicator, peer, tag, *tokens_);
  if (remote_.data() == nullptr) throw Error(ErrorCategory::kTransport, where + ": the peer's counter is not mapped");
  wait_ = communicator.deviceDiagnostics().waitContext(-1, peer);
}

MemorySemaphore::~MemorySemaphore() = default;

device::MemorySemaphoreHandle MemorySemaphore::deviceHandle() const {
  return {tokens_->inbound(), tokens_->expected(), static_cast<uint64_t*>(remote_.data()), wait_};
}

HostSemaphore::HostSemaphore(Communicator& communicator, std::shared_ptr<Connection> connection, uint64_t tag)
    : connection_(std::move(connection)) {
  if (!connection_) throw Error(ErrorCategory::kInvalidArgument, "host semaphore: the connection is null");
  tokens_ = std::make_unique<SemaphoreTokens>(communicator, TransportFlags(connection_->transport()),
                                              connection_->remoteRank(), false);
  remote_ = exchangeTokens(communicator, connection_->remoteRank(), tag, *tokens_);
  wait_ = communicator.deviceDiagnostics().waitContext(-1, connection_->remoteRank());
}

HostSemaphore::~HostSemaphore() = default;

void HostSemaphore::signal() { connection_->writeValue(remote_, 0, ++outbound_); }

device::HostSemaphoreHandle HostSemaphore::deviceHandle() const {
  return {tokens_->inbound(), tokens_->expected(), wait_};
}

}  // namespace loom
