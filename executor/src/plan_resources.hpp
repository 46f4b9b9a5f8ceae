#pragma once

// What one plan needs on one communicator, built once (collectively) and kept while the plan is
// cached: a semaphore pair per memory channel, a connection and host semaphore per port channel,
// scratch (grown to the largest message seen), and the device words that live across calls (per
// block call counts, which give LL flags and halves; cross-block semaphores; barrier counters).

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend.hpp"
#include "loom/communicator.hpp"
#include "loom/plan.hpp"
#include "loom/proxy_service.hpp"
#include "loom/semaphore.hpp"
#include "loom/transport.hpp"

namespace loom {

struct ChannelResources {
  ChannelType type = ChannelType::kMemory;
  int peer = -1;
  Transport transport = Transport::kCudaIpc;
  std::shared_ptr<MemorySemaphore> memory;  // memory channels
  std::shared_ptr<HostSemaphore> host;      // port channels
  uint32_t proxySemaphore = 0;              // port channels: the proxy's id of `host`
  std::shared_ptr<void> staging;            // port channels: packets assembled for the peer (scratch-sized)
};

// Tags of the setup exchanges: `serial` counts collective setup steps (the same on every rank, as
// every rank takes them in the same order); the low bits tell the messages of one step apart.
inline uint64_t setupTag(uint64_t serial, uint64_t part) { return serial << 24 | part; }

class PlanResources {
 public:
  // `proxy` is made on first need (a plan with port channels) and shared by the executor's plans.
  PlanResources(const Plan& plan, Communicator& communicator, Backend& backend,
                const std::function<ProxyService&()>& proxy, uint64_t serial);
  // Gives the proxy back its semaphores' ids (and with them the connections).
  ~PlanResources();
  PlanResources(const PlanResources&) = delete;
  PlanResources& operator=(const PlanResources&) = delete;

  const Plan& plan() const { return plan_; }
  Communicator& communicator() const { return communicator_; }
  const GpuProgram& program() const { return plan_.gpu(uint32_t(communicator_.rank())); }
  const std::vector<ChannelResources>& channels() const { return channels_; }
  bool hasPortChannels() const { return proxy_ != nullptr; }
  // Whether a port channel runs over CUDA IPC: its proxy then moves data with CUDA calls while the kernel
  // waits for it (docs/executor.md, limits: such plans belong on a stream other than the legacy default).
  bool proxyCallsCuda() const;
  ProxyService* proxy() const { return proxy_; }
  // Transports this rank's buffers are registered for (those of its channels).
  TransportFlags transports() const { return transports_; }
  // The peers this rank has channels to, each once.
  const std::vector<int>& peers() const { return peers_; }

  uint64_t* callCounts() const { return static_cast<uint64_t*>(callCounts_.get()); }
  uint64_t* semaphores() const { return static_cast<uint64_t*>(semaphores_.get()); }
  uint64_t* barriers() const { return static_cast<uint64_t*>(barriers_.get()); }

  // Scratch of at least `bytes`; true when it had to grow (the old one is gone: programs that
  // refer to it, here or at peers, must be rebuilt).
  bool reserveScratch(uint64_t bytes);
  void* scratch() const { return scratch_.get(); }
  // The scratch allocation itself: a context keeps the one it was set up with (a CUDA graph may
  // replay it after the scratch has grown).
  const std::shared_ptr<void>& scratchMemory() const { return scratch_; }
  uint64_t scratchBytes() const { return scratchBytes_; }

 private:
  void checkSamePlanEverywhere() const;
  void connectChannels(const std::function<ProxyService&()>& proxy, uint64_t serial);

  Plan plan_;
  Communicator& communicator_;
  Backend& backend_;
  ProxyService* proxy_ = nullptr;
  std::vector<ChannelResources> channels_;
  std::vector<int> peers_;
  TransportFlags transports_;
  std::shared_ptr<void> callCounts_, semaphores_, barriers_, scratch_;
  uint64_t scratchBytes_ = 0;
};

}  // namespace loom
