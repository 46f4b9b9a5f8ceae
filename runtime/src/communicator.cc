#include "loom/communicator.hpp"

#include <unistd.h>

#include <map>
#include <mutex>
#include <random>

#include "byte_io.hpp"
#include "communicator_impl.hpp"
#include "connection_factory.hpp"
#include "deadline.hpp"
#include "environment.hpp"
#include "fd_passing.hpp"
#include "gpu.hpp"
#include "host_identity.hpp"
#include "log.hpp"
#include "loom/device/chaos.hpp"
#include "loom/error.hpp"
#include "loom/launch_environment.hpp"
#include "memory_table.hpp"
#include "registered_memory.hpp"
#include "setup_tags.hpp"
#include "shared_host_segment.hpp"

namespace loom {

// How long an abort waits for its announcement to go out (Bootstrap::announceAbort): bounded, so that abort()
// stays well within the caller's wait.
constexpr int64_t kAnnounceAbortWaitMs = 200;

namespace {

// Ranks that cannot pass descriptors to each other are on different hosts, whatever the launcher says. When
// its count of local ranks differs from the host identity's, the job hears which rule applied (once).
void compareWithLauncher(int localWorldSize, int worldSize) {
  if (processEnvironment("LOOM_TEST_HOST_ID")) return;  // tests that split one machine into hosts
  std::optional<LaunchEnvironment> launch;
  try {
    launch = detectLaunchEnvironment();
  } catch (const Error&) {
    return;  // no launcher: nothing to compare with
  }
  if (!launch->localWorldSize || launch->worldSize != worldSize || *launch->localWorldSize == localWorldSize) return;
  static std::once_flag said;
  std::call_once(said, [&] {
    logWarning("host identity: " + std::to_string(localWorldSize) + " of the job's " + std::to_string(worldSize) +
               " ranks share this host (" + hostIdentityText() + "), but " + launch->launcher + " says " +
               std::to_string(*launch->localWorldSize) +
               " ranks are local; Loom follows the host identity (ranks in another network namespace, boot or host "
               "name cannot share memory or pass descriptors with this one, so it reaches them as other hosts)");
  });
}

}  // namespace

Communicator::Communicator(std::shared_ptr<Bootstrap> bootstrap, IbConfig ibConfig, int cudaDevice)
    : impl_(std::make_unique<Impl>()) {
  if (!bootstrap) throw Error(ErrorCategory::kInvalidArgument, "Communicator: bootstrap is null");
  Impl& impl = *impl_;
  impl.bootstrap = std::move(bootstrap);
  impl.ibConfig = std::move(ibConfig);
  if (cudaDevice < kCurrentDevice) {
    throw Error(ErrorCategory::kInvalidArgument, "Communicator: cudaDevice " + std::to_string(cudaDevice) +
                                                     " is neither a device, kHostOnly nor kCurrentDevice");
  }
  impl.cudaDevice = cudaDevice == kCurrentDevice ? gpu::currentDevice() : cudaDevice;

  impl.cudaBusId = impl.cudaDevice >= 0 ? gpu::pciBusId(impl.cudaDevice) : std::string();
  chaos::enabled();  // a malformed LOOM_CPU_CHAOS fails here, not on a block's thread

  // Every rank's host, process and GPU; rank 0's random job key names the job's Unix sockets.
  std::random_device random;
  const uint64_t key = (uint64_t(random()) << 32) ^ random() ^ processHash();
  // And the identity of its descriptor mailbox: only those who know it may pass this rank descriptors.
  const MailboxIdentity mailbox = MailboxIdentity::drawn();
  ByteWriter mine;
  mine.put(hostHash()).put(key).put(processHash()).put(uint32_t(impl.cudaBusId.size()));
  mine.putBytes(std::span(reinterpret_cast<const uint8_t*>(impl.cudaBusId.data()), impl.cudaBusId.size()));
  mine.put(mailbox.pid).put(mailbox.name);
  mine.putBytes(std::span(mailbox.noteKey.data(), mailbox.noteKey.size()));
  std::vector<Bootstrap::Bytes> all = impl.bootstrap->allGather(mine.take());
  std::map<uint64_t, int> nodeOfHost;
  const int rank = impl.bootstrap->rank();
  uint64_t myHost = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    ByteReader in(all[r], "host identity of rank " + std::to_string(r));
    const uint64_t host = in.get<uint64_t>();
    const uint64_t rankKey = in.get<uint64_t>();
    impl.processes.push_back(in.get<uint64_t>());
    std::string busId(in.get<uint32_t>(), '\0');
    in.getBytes(std::span(reinterpret_cast<uint8_t*>(busId.data()), busId.size()));
    impl.busIds.push_back(std::move(busId));
    MailboxIdentity identity;
    identity.pid = in.get<int32_t>();
    identity.name = in.get<uint64_t>();
    in.getBytes(std::span(identity.noteKey.data(), identity.noteKey.size()));
    impl.mailboxes.push_back(identity);
    if (r == 0) impl.jobKey = rankKey;
    auto [it, fresh] = nodeOfHost.emplace(host, int(nodeOfHost.size()));
    impl.nodes.push_back(it->second);
    if (int(r) == rank) myHost = host;
  }
  impl.nodeCount = int(nodeOfHost.size());
  const int myNode = nodeOfHost.at(myHost);
  for (int r = 0; r < int(impl.nodes.size()); ++r) {
    if (impl.nodes[r] != myNode) continue;
    if (r < rank) ++impl.localRank;
    ++impl.localWorldSize;
  }
  compareWithLauncher(impl.localWorldSize, impl.bootstrap->worldSize());
}

Communicator::~Communicator() = default;

Bootstrap& Communicator::bootstrap() const { return *impl_->bootstrap; }
std::shared_ptr<Bootstrap> Communicator::sharedBootstrap() const { return impl_->bootstrap; }
int Communicator::rank() const { return impl_->rank(); }
int Communicator::worldSize() const { return impl_->bootstrap->worldSize(); }
int Communicator::nodeCount() const { return impl_->nodeCount; }
int Communicator::localRank() const { return impl_->localRank; }
int Communicator::localWorldSize() const { return impl_->localWorldSize; }
int Communicator::cudaDevice() const { return impl_->cudaDevice; }
std::string Communicator::cudaDeviceBusId() const { return impl_->cudaBusId; }

std::vector<int> Communicator::ranksSharingGpu() const {
  std::vector<int> ranks;
  if (impl_->cudaBusId.empty()) return ranks;
  for (int r = 0; r < worldSize(); ++r) {
    if (impl_->nodes[r] == impl_->nodes[rank()] && impl_->busIds[r] == impl_->cudaBusId) ranks.push_back(r);
  }
  return ranks;
}

int Communicator::node(int rank) const {
  if (rank < 0 || rank >= worldSize()) {
    throw Error(ErrorCategory::kInvalidArgument, "Communicator::node: rank " + std::to_string(rank) + " is not in 0.." +
                                                     std::to_string(worldSize() - 1));
  }
  return impl_->nodes[rank];
}

bool Communicator::sameNode(int peer) const { return node(peer) == node(rank()); }
bool Communicator::sameProcess(int peer) const {
  node(peer);  // checks the rank
  return impl_->processes[peer] == impl_->processes[rank()];
}
bool Communicator::hostPeersInOtherProcesses() const {
  for (int r = 0; r < worldSize(); ++r) {
    if (sameNode(r) && !sameProcess(r)) return true;
  }
  return false;
}
Communicator::Impl& Communicator::impl() const { return *impl_; }
DeviceDiagnostics& Communicator::deviceDiagnostics() const { return impl_->deviceDiagnostics(); }

void Communicator::abort() {
  impl_->bootstrap->abort();
  impl_->deviceDiagnostics().requestAbort();
  // After the flag: a bootstrap step in flight ends on it and lets the announcement have the bootstrap.
  impl_->bootstrap->announceAbort(kAnnounceAbortWaitMs);
}

RegisteredMemory Communicator::registerMemory(void* data, uint64_t bytes, TransportFlags transports) {
  Impl& impl = *impl_;
  const std::string what = "registerMemory on " + impl.where();
  if (data == nullptr || bytes == 0) {
    throw Error(ErrorCategory::kInvalidArgument, what + ": data must be non-null and bytes above 0");
  }
  if (transports.empty()) throw Error(ErrorCategory::kInvalidArgument, what + ": no transport given");
  const gpu::PointerInfo info = impl.cudaDevice >= 0 ? gpu::pointerInfo(data) : gpu::PointerInfo{};
  auto memory = std::make_shared<RegisteredMemory::Impl>();
  memory->hostHash = hostHash();
  memory->processHash = processHash();
  memory->ownerRank = impl.rank();
  memory->address = reinterpret_cast<uint64_t>(data);
  memory->bytes = bytes;
  memory->location = info.location;
  memory->deviceId = info.device;
  memory->transports = transports;
  memory->localPointer = data;
  if (info.location == MemoryLocation::kDevice &&
      (memory->address < info.allocationBase || bytes > info.allocationBase + info.allocationBytes - memory->address)) {
    throw Error(ErrorCategory::kInvalidArgument,
                what + ": " + std::to_string(bytes) + " bytes run past the end of their device allocation");
  }
  if (info.location == MemoryLocation::kHost) {
    // Inside a shared host segment, peers in other processes of this host can map it.
    if (auto segment = findSharedHostSegment(data, bytes)) {
      memory->ipcKind = IpcKind::kHostFd;
      memory->ipcOffset = memory->address - reinterpret_cast<uint64_t>(segment->base);
      memory->ipcAllocationBytes = segment->bytes;
      memory->hostSegment = std::move(segment);
    }
  }
  if (transports.has(Transport::kCudaIpc)) {
    if (info.location != MemoryLocation::kDevice) {
      throw Error(ErrorCategory::kInvalidArgument, what + ": CUDA IPC needs device memory, and this is host memory");
    }
    memory->ipcOffset = memory->address - info.allocationBase;
    memory->ipcAllocationBytes = info.allocationBytes;
    if (info.fromCuMem) {
      memory->ipcKind = IpcKind::kPosixFd;
      memory->ipcAllocationId = gpu::allocationId(data);
    } else {
      memory->ipcKind = IpcKind::kLegacy;
      memory->ipcLegacyHandle = gpu::exportLegacyIpcHandle(reinterpret_cast<void*>(info.allocationBase));
    }
  }
  {
    std::lock_guard lock(impl.mutex);
    if (transports.has(Transport::kIb)) registerIbMemory(impl.ib(), *memory);
  }
  auto [id, entry] = MemoryTable::process().add({data, bytes, info.location, info.device, transports});
  memory->id = id;
  memory->keepAlive = entry;
  return RegisteredMemory(std::move(memory));
}

void Communicator::Impl::sendMemoryOn(const RegisteredMemory& memory, int peer, uint64_t wireTag, uint64_t fdTag) {
  if (!memory.valid()) throw Error(ErrorCategory::kInvalidArgument, "sendMemory on " + where() + ": no memory");
  bootstrap->send(peer, wireTag, memory.serialize());
  const RegisteredMemory::Impl& m = memory.impl();
  // A descriptor goes only to a peer in another process of this host: a peer in this process (ranks as
  // threads) uses the address as it is and never takes one, and untaken ones would fill its socket.
  if (!memory.isLocal() || !sameNode(peer) || processes[peer] == processes[rank()]) return;
  if (m.ipcKind == IpcKind::kHostFd) {
    std::lock_guard lock(mutex);
    mailbox().send(peer, fdTag, m.hostSegment->fd, Deadline(bootstrap->timeoutMs()));
    return;
  }
  if (m.ipcKind != IpcKind::kPosixFd) return;
  const int fd = gpu::exportPosixFd(reinterpret_cast<void*>(m.address - m.ipcOffset));
  std::lock_guard lock(mutex);
  try {
    mailbox().send(peer, fdTag, fd, Deadline(bootstrap->timeoutMs()));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

RegisteredMemory Communicator::Impl::recvMemoryOn(int peer, uint64_t wireTag, uint64_t fdTag) {
  Bootstrap::Bytes bytes = bootstrap->recv(peer, wireTag);
  auto memory = parseRegisteredMemory(bytes);
  int fd = -1;
  const bool passesFd = memory->ipcKind == IpcKind::kPosixFd || memory->ipcKind == IpcKind::kHostFd;
  if (passesFd && !memory->isLocal() && memory->hostHash == hostHash()) {
    std::lock_guard lock(mutex);
    fd = mailbox().receive(peer, fdTag, Deadline(bootstrap->timeoutMs()));
  }
  try {
    RegisteredMemory mapped = mapRegisteredMemory(std::move(memory), fd);
    if (fd >= 0) ::close(fd);
    return mapped;
  } catch (...) {
    if (fd >= 0) ::close(fd);
    throw;
  }
}

void Communicator::sendMemory(const RegisteredMemory& memory, int peer, uint64_t tag) {
  impl_->checkPeer(peer, "sendMemory");
  const uint64_t wireTag = setupTag(SetupPurpose::kMemory, tag, "sendMemory");
  impl_->sendMemoryOn(memory, peer, wireTag, wireTag);
}

RegisteredMemory Communicator::recvMemory(int peer, uint64_t tag) {
  impl_->checkPeer(peer, "recvMemory");
  const uint64_t wireTag = setupTag(SetupPurpose::kMemory, tag, "recvMemory");
  return impl_->recvMemoryOn(peer, wireTag, wireTag);
}

std::shared_ptr<Connection> Communicator::connect(int peer, Transport transport, uint64_t tag) {
  Impl& impl = *impl_;
  impl.checkPeer(peer, "connect");
  ConnectionSetup setup{*impl.bootstrap,
                        impl.rank(),
                        peer,
                        setupTag(SetupPurpose::kConnection, tag, "connect"),
                        impl.cudaDevice,
                        impl.bootstrap->timeoutMs()};
  std::shared_ptr<Connection> connection = [&] {
    switch (transport) {
      case Transport::kCudaIpc:
        if (!sameNode(peer)) {
          throw Error(ErrorCategory::kInvalidArgument, "connect on " + impl.where() + ": CUDA IPC to rank " +
                                                           std::to_string(peer) + ", which runs on another host");
        }
        return connectCudaIpc(setup);
      case Transport::kTcp:
        return connectTcp(setup);
      case Transport::kIb: {
        std::lock_guard lock(impl.mutex);
        IbContext& context = impl.ib();
        return connectIb(context, setup);
      }
    }
    throw Error(ErrorCategory::kInvalidArgument, "connect: unknown transport");
  }();
  // A link that fails ends the waits on its peer at once (as a departed process does), naming why. The
  // record is made now, so that the sink can hold it.
  impl.deviceDiagnostics();
  connection->reportFailuresTo([diagnostics = std::weak_ptr(impl.diagnostics), peer](const std::string& why) {
    if (std::shared_ptr<DeviceDiagnostics> alive = diagnostics.lock()) alive->notePeerGone(peer, why);
  });
  return connection;
}

}  // namespace loom
