#pragma once

// Semaphores between two ranks: 64-bit counters that a peer raises and this rank waits on.
//
// - MemorySemaphore: between GPUs of one host (or host threads of one process, for the CPU
//   backend). Each side's inbound counter is mapped into the other's address space; a device-side
//   signal is one release atomic add on the peer's counter, a wait polls the local counter with
//   acquire ordering against an expected count.
// - HostSemaphore: signalled by the host through a connection (the proxy thread of a port channel
//   writes the peer's counter after the data it guards), waited on by the GPU.
//
// Both are set up pairwise: the two ranks create theirs with each other's rank and the same tag.

#include <cstdint>
#include <memory>

#include "loom/communicator.hpp"
#include "loom/connection.hpp"
#include "loom/device/semaphore_device.hpp"
#include "loom/registered_memory.hpp"

namespace loom {

// The two words of a semaphore (inbound count, expected count), in device memory when this rank has
// a GPU, else in host memory.
class SemaphoreTokens;

class MemorySemaphore {
 public:
  MemorySemaphore(Communicator& communicator, int peer, uint64_t tag);
  ~MemorySemaphore();
  device::MemorySemaphoreHandle deviceHandle() const;
  int peer() const { return peer_; }

 private:
  int peer_;
  std::unique_ptr<SemaphoreTokens> tokens_;
  RegisteredMemory remote_;
  device::WaitContext wait_;
};

class HostSemaphore {
 public:
  HostSemaphore(Communicator& communicator, std::shared_ptr<Connection> connection, uint64_t tag);
  ~HostSemaphore();
  // Raises the peer's count by one once every earlier write of the connection has landed there.
  void signal();
  device::HostSemaphoreHandle deviceHandle() const;
  Connection& connection() const { return *connection_; }

 private:
  std::shared_ptr<Connection> connection_;
  std::unique_ptr<SemaphoreTokens> tokens_;
  RegisteredMemory remote_;
  uint64_t outbound_ = 0;
  device::WaitContext wait_;
};

}  // namespace loom
