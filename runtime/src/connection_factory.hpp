#pragma once

// How Communicator::connect builds a connection of each transport. Both ranks call the same
// factory with each other's rank and the same bootstrap tag; a factory may exchange any number of
// messages with the peer over the bootstrap on exactly that tag.

#include <cstdint>
#include <memory>

#include "loom/bootstrap.hpp"
#include "loom/connection.hpp"
#include "loom/registered_memory.hpp"
#include "loom/transport.hpp"

namespace loom {

struct ConnectionSetup {
  Bootstrap& bootstrap;
  int localRank;
  int remoteRank;
  uint64_t tag;    // bootstrap tag reserved for this connection's setup messages
  int cudaDevice;  // this rank's device; -1 when the job runs on host memory only
  int64_t timeoutMs;
};

std::shared_ptr<Connection> connectCudaIpc(const ConnectionSetup& setup);  // cuda_ipc_connection.cc
std::shared_ptr<Connection> connectTcp(const ConnectionSetup& setup);      // tcp_connection.cc

// InfiniBand (ib_context.cc; connections in ib_connection.cc over ib_queue_pair.cc, with
// ib_signal_receiver.cc applying write-with-immediate signals): one context per communicator and
// device, opened on first use; a Transport error when libibverbs or the device is missing.
class IbContext;
std::shared_ptr<IbContext> openIbContext(const IbConfig& config);
// Registers the memory with the context's protection domain: fills ibLkey, ibRkey, ibRegion.
void registerIbMemory(IbContext& context, RegisteredMemory::Impl& memory);
std::shared_ptr<Connection> connectIb(IbContext& context, const ConnectionSetup& setup);

}  // namespace loom
