#pragma once

// A communicator is one rank's view of a job: who the ranks are and which host each runs on
// (learned from each host's identity at creation), the memory this rank registers, and the
// connections it opens to peers. Channels (memory_channel.hpp, port_channel.hpp) are built from
// what it provides.
//
// Every rank of the job creates one with the same bootstrap; setup calls that involve a peer
// (sendMemory/recvMemory, connect) must be matched on that peer with the same tag.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/bootstrap.hpp"
#include "loom/connection.hpp"
#include "loom/device_diagnostics.hpp"
#include "loom/registered_memory.hpp"
#include "loom/transport.hpp"

namespace loom {

class Communicator {
 public:
  // Collective: every rank calls it. Learns the host of every rank through the bootstrap.
  // `cudaDevice`: the GPU this rank uses; by default the calling thread's current device (none in a
  // build without CUDA or on a host without GPUs). kHostOnly keeps everything (semaphores, FIFOs,
  // diagnostics) in host memory for ranks that run on host threads (the CPU backend), GPUs or not.
  static constexpr int kCurrentDevice = -2;
  static constexpr int kHostOnly = -1;
  explicit Communicator(std::shared_ptr<Bootstrap> bootstrap, IbConfig ibConfig = IbConfig::fromEnvironment(),
                        int cudaDevice = kCurrentDevice);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  Bootstrap& bootstrap() const;
  std::shared_ptr<Bootstrap> sharedBootstrap() const;
  int rank() const;
  int worldSize() const;
  int node(int rank) const;  // index of the rank's host, in order of first appearance
  int nodeCount() const;
  int localRank() const;       // index of this rank among the ranks of its host
  int localWorldSize() const;  // ranks on this rank's host
  bool sameNode(int peer) const;
  // Whether `peer` is a thread of this very process (the CPU backend's threads mode).
  bool sameProcess(int peer) const;
  // Whether a rank of this host runs in another process: then host memory that peers touch must be
  // shared host memory (loom/shared_host_memory.hpp), as plain host memory is private.
  bool hostPeersInOtherProcesses() const;
  // The CUDA device this rank uses, -1 when it runs on host memory only.
  int cudaDevice() const;
  // The PCI bus id of cudaDevice() ("0000:18:00.0"), which names the GPU whatever CUDA_VISIBLE_DEVICES
  // each process sees; empty for a host-only communicator.
  std::string cudaDeviceBusId() const;
  // The ranks of this host whose communicators use this rank's GPU, this one included, in rank order
  // (one entry normally; more only for ranks sharing one GPU, a testing mode); empty for host-only.
  std::vector<int> ranksSharingGpu() const;

  // Registers [data, data + bytes) for the given transports. Host or device memory is told apart
  // by asking CUDA. CUDA IPC needs device memory from cudaMalloc or from cuMem with a POSIX
  // file-descriptor handle type (GpuBuffer makes either).
  RegisteredMemory registerMemory(void* data, uint64_t bytes, TransportFlags transports);
  // Sends a registration to `peer`; the peer calls recvMemory with the same tag. On the same host a
  // cuMem allocation's file descriptor goes along over a Unix socket.
  void sendMemory(const RegisteredMemory& memory, int peer, uint64_t tag);
  RegisteredMemory recvMemory(int peer, uint64_t tag);

  // Opens a connection to `peer`; the peer must call connect with this rank, the same transport and
  // the same tag. Cuda IPC needs both ranks on one host.
  std::shared_ptr<Connection> connect(int peer, Transport transport, uint64_t tag);

  // Where device-side waits of this rank's channels report a timeout (made on first use).
  DeviceDiagnostics& deviceDiagnostics() const;

  // Ends waits in flight on other threads without waiting for peers (which may be dead): the
  // bootstrap's and the CPU backend's host-thread waits throw within about 100 ms. Executor::abort
  // calls it and then frees what the executor holds.
  void abort();

  struct Impl;
  Impl& impl() const;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
