#pragma once

// What a RegisteredMemory holds. Transports read the fields they need; only the registering process
// (communicator.cc) and deserialisation (registered_memory.cc) fill them in.

#include <array>
#include <cstdint>
#include <memory>

#include "loom/registered_memory.hpp"

namespace loom {

// How a peer on the same host maps the memory: a legacy CUDA IPC handle (cudaMalloc memory), a POSIX
// file descriptor exported from a cuMem allocation, or the descriptor of a shared host segment
// (loom/shared_host_memory.hpp); descriptors travel over a Unix socket.
enum class IpcKind : uint8_t { kNone = 0, kLegacy = 1, kPosixFd = 2, kHostFd = 3 };

struct SharedHostSegment;

struct RegisteredMemory::Impl {
  // Identity: `id` is unique among the registrations of the owner process.
  uint64_t id = 0;
  uint64_t hostHash = 0;     // the owner's host (boot id and host name)
  uint64_t processHash = 0;  // the owner process (host hash and pid)
  int ownerRank = -1;
  uint64_t address = 0;  // in the owner's process
  uint64_t bytes = 0;
  MemoryLocation location = MemoryLocation::kHost;
  int deviceId = -1;
  TransportFlags transports;

  // CUDA IPC and shared host segments: the handle describes the whole allocation, which starts
  // `ipcOffset` bytes before `address` and is `ipcAllocationBytes` long. `hostSegment` (owner
  // only) keeps a shared host segment and its descriptor alive while the registration lives.
  IpcKind ipcKind = IpcKind::kNone;
  std::array<uint8_t, 64> ipcLegacyHandle{};
  uint64_t ipcOffset = 0;
  uint64_t ipcAllocationBytes = 0;
  uint64_t ipcAllocationId = 0;  // the owner's CUDA id of the allocation (never reused in its process), or 0
  std::shared_ptr<const SharedHostSegment> hostSegment;

  // InfiniBand: the memory region's keys. `ibRegion` owns the registration in the owner process.
  uint32_t ibLkey = 0;
  uint32_t ibRkey = 0;
  std::shared_ptr<void> ibRegion;

  // This process's view: the pointer usable here (the owner's own, or an IPC mapping of a peer's
  // buffer) and whatever keeps it valid (the mapping, the memory-table entry).
  void* localPointer = nullptr;
  std::shared_ptr<void> keepAlive;

  bool isLocal() const;
};

}  // namespace loom
