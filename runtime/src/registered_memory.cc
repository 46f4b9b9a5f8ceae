#include "registered_memory.hpp"

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "byte_io.hpp"
#include "gpu.hpp"
#include "host_identity.hpp"
#include "loom/error.hpp"
#include "shared_host_segment.hpp"

namespace loom {
namespace {

constexpr uint32_t kMagic = 0x4d52434c;  // "LCRM"
constexpr uint16_t kVersion = 2;

// A peer's cuMem allocation imported into this process once per importing device, whatever number of
// registrations (and communicators: a split's and its parent's) name it: one mapping of its pages, and
// no import and map at each context set up on it. Keyed by the owner process and its id of the
// allocation, which CUDA never reuses there (an address may be: a freed allocation's successor).
std::shared_ptr<void> importSharedPosixFd(const RegisteredMemory::Impl& m, int fd, void** base) {
  const int device = gpu::currentDevice();
  if (m.ipcAllocationId == 0) return gpu::importPosixFd(fd, m.ipcAllocationBytes, device, base);
  using Key = std::tuple<uint64_t, uint64_t, uint64_t, int>;
  static std::mutex mutex;
  static std::map<Key, std::pair<std::weak_ptr<void>, void*>> imported;
  const Key key{m.processHash, m.ipcAllocationId, m.ipcAllocationBytes, device};
  std::lock_guard lock(mutex);
  std::erase_if(imported, [](const auto& entry) { return entry.second.first.expired(); });
  if (auto found = imported.find(key); found != imported.end()) {
    if (std::shared_ptr<void> mapping = found->second.first.lock()) {
      *base = found->second.second;
      return mapping;
    }
  }
  std::shared_ptr<void> mapping = gpu::importPosixFd(fd, m.ipcAllocationBytes, device, base);
  imported[key] = {mapping, *base};
  return mapping;
}

}  // namespace

bool RegisteredMemory::Impl::isLocal() const { return processHash == loom::processHash(); }

RegisteredMemory::RegisteredMemory(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

void* RegisteredMemory::data() const { return impl_->localPointer; }
uint64_t RegisteredMemory::originalAddress() const { return impl_->address; }
uint64_t RegisteredMemory::bytes() const { return impl_->bytes; }
int RegisteredMemory::ownerRank() const { return impl_->ownerRank; }
MemoryLocation RegisteredMemory::location() const { return impl_->location; }
int RegisteredMemory::deviceId() const { return impl_->deviceId; }
TransportFlags RegisteredMemory::transports() const { return impl_->transports; }
bool RegisteredMemory::isLocal() const { return impl_->isLocal(); }

std::vector<uint8_t> RegisteredMemory::serialize() const {
  const Impl& m = *impl_;
  ByteWriter out;
  out.put(kMagic).put(kVersion);
  out.put(m.id).put(m.hostHash).put(m.processHash).put(int32_t(m.ownerRank));
  out.put(m.address).put(m.bytes).put(m.location).put(int32_t(m.deviceId)).put(m.transports.bits());
  out.put(m.ipcKind).putBytes(m.ipcLegacyHandle).put(m.ipcOffset).put(m.ipcAllocationBytes).put(m.ipcAllocationId);
  out.put(m.ibRkey);
  return out.take();
}

std::shared_ptr<RegisteredMemory::Impl> parseRegisteredMemory(std::span<const uint8_t> bytes) {
  ByteReader in(bytes, "registered memory");
  if (in.get<uint32_t>() != kMagic) {
    throw Error(ErrorCategory::kInvalidArgument, "registered memory: not a serialised registration");
  }
  if (uint16_t version = in.get<uint16_t>(); version != kVersion) {
    throw Error(ErrorCategory::kInvalidArgument, "registered memory: format version " + std::to_string(version) +
                                                     ", this build reads " + std::to_string(kVersion));
  }
  auto m = std::make_shared<RegisteredMemory::Impl>();
  m->id = in.get<uint64_t>();
  m->hostHash = in.get<uint64_t>();
  m->processHash = in.get<uint64_t>();
  m->ownerRank = in.get<int32_t>();
  m->address = in.get<uint64_t>();
  m->bytes = in.get<uint64_t>();
  m->location = in.get<MemoryLocation>();
  m->deviceId = in.get<int32_t>();
  m->transports = TransportFlags::fromBits(in.get<uint8_t>());
  m->ipcKind = in.get<IpcKind>();
  in.getBytes(m->ipcLegacyHandle);
  m->ipcOffset = in.get<uint64_t>();
  m->ipcAllocationBytes = in.get<uint64_t>();
  m->ipcAllocationId = in.get<uint64_t>();
  m->ibRkey = in.get<uint32_t>();
  in.finish();
  if (m->location != MemoryLocation::kHost && m->location != MemoryLocation::kDevice) {
    throw Error(ErrorCategory::kInvalidArgument, "registered memory: unknown location");
  }
  if (m->ipcKind > IpcKind::kHostFd)
    throw Error(ErrorCategory::kInvalidArgument, "registered memory: unknown IPC kind");
  if (m->ipcOffset > m->ipcAllocationBytes || m->bytes > m->ipcAllocationBytes - m->ipcOffset) {
    if (m->ipcKind != IpcKind::kNone) {
      throw Error(ErrorCategory::kInvalidArgument, "registered memory: the range lies outside its IPC allocation");
    }
  }
  return m;
}

RegisteredMemory mapRegisteredMemory(std::shared_ptr<RegisteredMemory::Impl> m, int fd) {
  if (m->isLocal()) {
    // Another rank of this very process (ranks as threads, or GPUs driven by one process): the address is
    // valid as it is, once this rank's GPU may reach the other GPU's memory.
    m->localPointer = reinterpret_cast<void*>(m->address);
    if (m->location == MemoryLocation::kDevice) {
      gpu::allowAccessFromCurrentDevice(m->deviceId, m->ipcKind == IpcKind::kPosixFd, m->address - m->ipcOffset,
                                        m->ipcAllocationBytes);
    }
  } else if (m->hostHash == hostHash() && m->location == MemoryLocation::kDevice &&
             m->transports.has(Transport::kCudaIpc)) {
    void* base = nullptr;
    if (m->ipcKind == IpcKind::kLegacy) {
      m->keepAlive = gpu::openLegacyIpcHandle(m->ipcLegacyHandle, &base);
    } else if (m->ipcKind == IpcKind::kPosixFd) {
      if (fd < 0) {
        throw Error(ErrorCategory::kTransport, "registered memory of rank " + std::to_string(m->ownerRank) +
                                                   ": its file descriptor did not come with it");
      }
      m->keepAlive = importSharedPosixFd(*m, fd, &base);
    }
    if (base != nullptr) m->localPointer = static_cast<uint8_t*>(base) + m->ipcOffset;
  } else if (m->hostHash == hostHash() && m->ipcKind == IpcKind::kHostFd) {
    // Host memory of a rank in another process of this host (the multi-process CPU backend).
    const std::string what = "shared host memory of rank " + std::to_string(m->ownerRank);
    if (fd < 0) throw Error(ErrorCategory::kTransport, what + ": its file descriptor did not come with it");
    void* base = nullptr;
    m->keepAlive = mapSharedHostSegment(fd, m->ipcAllocationBytes, &base, what);
    m->localPointer = static_cast<uint8_t*>(base) + m->ipcOffset;
  }
  return RegisteredMemory(std::move(m));
}

}  // namespace loom
