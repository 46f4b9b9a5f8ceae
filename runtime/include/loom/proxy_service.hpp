#pragma once

// The proxy: a host thread that carries out what GPUs push into its FIFO through the connections
// of port channels. It is the CPU side of every port channel of one rank.
//
// Set up memories and semaphores (addMemory, addSemaphore), make port channels from their ids,
// start(); the thread sets the rank's CUDA device before its first CUDA call (so it creates no
// context on GPU 0), pins itself to the CPUs near the GPU, and runs until stop() or destruction,
// carrying out what was queued before them.
// A failed transfer is logged at once and kept: check() throws it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/communicator.hpp"
#include "loom/device/port_channel_device.hpp"
#include "loom/fifo.hpp"
#include "loom/registered_memory.hpp"
#include "loom/semaphore.hpp"

namespace loom {

class ProxyService {
 public:
  ProxyService(Communicator& communicator, uint64_t fifoSize = Fifo::kDefaultSize);
  ~ProxyService();
  ProxyService(const ProxyService&) = delete;
  ProxyService& operator=(const ProxyService&) = delete;

  // Ids for port channels (below 2^20). Both may be called while the proxy runs.
  uint32_t addMemory(RegisteredMemory memory);
  uint32_t addSemaphore(std::shared_ptr<HostSemaphore> semaphore);
  // Gives back ids that no program will name again (those of a call context or a plan being freed,
  // after their kernels ended): once every trigger queued before this call is carried out, the proxy
  // lets go of them, and of the mappings of peers' memory behind them (a peer may free that memory
  // and hand out a new allocation in the same place, which this process could not map while the old
  // mapping is open), and later add calls reuse the ids. Never throws: if the proxy does not drain
  // within the flush timeout, the entries stay and a warning says so.
  void remove(const std::vector<uint32_t>& memories, const std::vector<uint32_t>& semaphores = {});
  // How many memories it holds now (added and not removed).
  uint64_t memoriesHeld() const;
  // The device handle of a port channel: the semaphore (and its connection), the peer's memory as
  // destination, this rank's memory as source. `channel` only labels timeout reports; `user`, the
  // communicator whose program uses the channel when the proxy is shared (its rank and abort are the
  // waits'), is the proxy's own by default.
  device::PortChannelHandle portChannel(uint32_t semaphore, uint32_t dstMemory, uint32_t srcMemory, int channel = -1,
                                        const Communicator* user = nullptr) const;
  // Waits until every trigger queued before the call is carried out; false if that takes longer than
  // the flush timeout (or true at once when the proxy is not running).
  bool drain() const;

  void start();
  // Ends the thread once the triggers already queued are carried out (each bounded by its
  // connection's timeouts; the first that fails ends it), or at once with finishQueued false.
  void stop(bool finishQueued = true);
  bool running() const;
  // Throws the first error a trigger ran into, if any.
  void check() const;
  uint64_t triggersDone() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
