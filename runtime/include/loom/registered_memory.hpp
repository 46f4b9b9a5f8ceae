#pragma once

// A buffer that peers may read or write: its address and size, where it lives (host or which GPU),
// and what each transport it is registered for needs (a CUDA IPC handle, an InfiniBand memory
// region key). The owner registers it through its Communicator, sends it to peers
// (Communicator::sendMemory) and they receive a RegisteredMemory that refers to it: on the same
// host, with CUDA IPC, it is mapped into their address space and data() points at it.
//
// It is a shared handle: copies refer to one registration, which is released (IPC mapping closed,
// memory region deregistered) when the last copy goes.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "loom/transport.hpp"

namespace loom {

enum class MemoryLocation : uint8_t { kHost = 0, kDevice = 1 };

class RegisteredMemory {
 public:
  struct Impl;

  RegisteredMemory() = default;
  explicit RegisteredMemory(std::shared_ptr<Impl> impl);

  bool valid() const { return impl_ != nullptr; }
  // Usable in this process: the owner's own pointer, or the CUDA IPC mapping of a peer's buffer;
  // nullptr for a peer's memory that is not mapped here (another host, or no CUDA IPC).
  void* data() const;
  uint64_t originalAddress() const;  // the address in the owner's process
  uint64_t bytes() const;
  int ownerRank() const;
  MemoryLocation location() const;
  int deviceId() const;  // the owner's CUDA device, -1 for host memory
  TransportFlags transports() const;
  bool isLocal() const;  // registered by this process

  // The form that travels to peers (no pointers that mean anything elsewhere, no file descriptors:
  // Communicator::sendMemory passes those separately).
  std::vector<uint8_t> serialize() const;

  Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace loom
