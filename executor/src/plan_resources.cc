#include "plan_resources.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "loom/error.hpp"
#include "loom/ibverbs.hpp"
#include "loom/rank_list.hpp"
#include "module_loading.hpp"

namespace loom {
namespace {

// The transport of a port channel: the copy engine on one host, else InfiniBand when libibverbs
// has a device, else TCP; host memory (the CPU backend) always goes over TCP. LOOM_PORT_TRANSPORT
// (cuda_ipc, ib, tcp) forces one, e.g. to run TCP between GPUs of one host.
Transport portTransport(Communicator& communicator, int peer, bool gpu) {
  if (const char* forced = std::getenv("LOOM_PORT_TRANSPORT"); forced != nullptr && *forced != '\0') {
    const std::string_view name(forced);
    if (name == "cuda_ipc") return Transport::kCudaIpc;
    if (name == "ib") return Transport::kIb;
    if (name == "tcp") return Transport::kTcp;
    throw Error(ErrorCategory::kInvalidArgument,
                "LOOM_PORT_TRANSPORT: expected cuda_ipc, ib or tcp, got '" + std::string(name) + "'");
  }
  if (!gpu) return Transport::kTcp;
  if (communicator.sameNode(peer)) return Transport::kCudaIpc;
  const IbverbsStatus ib = ibverbsStatus();
  return ib.loaded && !ib.devices.empty() ? Transport::kIb : Transport::kTcp;
}

// Over CUDA IPC (GPUs of one host) and TCP, a port channel's proxy thread moves GPU memory with CUDA
// calls (copy-engine copies; copies through pinned host memory) while the kernel waits for them, and a
// lazy module load on another thread may keep those calls waiting for that kernel: it never ends. On 4
// H100s a proxy's copies never finished that way (docs/executor.md). InfiniBand needs no CUDA call.
void requireEagerLoading(const Plan& plan, int rank, const Channel& channel, Transport transport) {
  requireEagerModuleLoading("plan '" + plan.name + "', rank " + std::to_string(rank) + ", channel " +
                                std::to_string(channel.id) + ": the port channel to rank " +
                                std::to_string(channel.peer) + " runs over " + transportName(transport) +
                                ", where the proxy thread moves GPU memory with CUDA calls while the kernel "
                                "waits, and needs",
                            "with lazy loading, a kernel's first launch may wait for the running kernels while "
                            "they wait for the proxy");
}

void countBarriers(const std::vector<Op>& ops, std::set<uint32_t>& ids) {
  for (const Op& op : ops) {
    if (op.type == OpType::kBarrier) ids.insert(op.barrierId);
    countBarriers(op.body, ids);
  }
}

}  // namespace

PlanResources::PlanResources(const Plan& plan, Communicator& communicator, Backend& backend,
                             const std::function<ProxyService&()>& proxy, uint64_t serial)
    : plan_(plan), communicator_(communicator), backend_(backend) {
  // Executor::execute has checked the world size before it gets here.
  checkSamePlanEverywhere();
  const GpuProgram& gpu = program();
  callCounts_ = backend_.allocate(sizeof(uint64_t) * std::max<size_t>(gpu.threadblocks.size(), 1));
  std::vector<uint64_t> initial;
  for (const Semaphore& semaphore : gpu.semaphores) initial.push_back(semaphore.initialValue);
  semaphores_ = backend_.allocate(sizeof(uint64_t) * std::max<size_t>(initial.size(), 1));
  if (!initial.empty()) backend_.upload(semaphores_.get(), initial.data(), sizeof(uint64_t) * initial.size());
  std::set<uint32_t> barrierIds;
  for (const ThreadBlock& tb : gpu.threadblocks) countBarriers(tb.ops, barrierIds);
  barriers_ = backend_.allocate(sizeof(uint64_t) * std::max<size_t>(barrierIds.size(), 1));
  connectChannels(proxy, serial);
}

// Every rank must run the very same plan: compare content hashes before anything pairs up.
void PlanResources::checkSamePlanEverywhere() const {
  const auto* mine = reinterpret_cast<const uint8_t*>(&plan_.contentHash);
  const std::vector<Bootstrap::Bytes> hashes =
      communicator_.bootstrap().allGather(std::span<const uint8_t>(mine, sizeof(uint64_t)));
  std::vector<int> differing;
  for (size_t r = 0; r < hashes.size(); ++r) {
    if (hashes[r].size() != sizeof(uint64_t) || std::memcmp(hashes[r].data(), mine, sizeof(uint64_t)) != 0) {
      differing.push_back(int(r));
    }
  }
  if (!differing.empty()) {
    throw Error(ErrorCategory::kInvalidArgument, "plan: rank " + std::to_string(communicator_.rank()) + " runs '" +
                                                     plan_.name + "' but " + rankList(differing) +
                                                     (differing.size() == 1 ? " runs" : " run") +
                                                     " a different plan (content hashes differ)");
  }
}

void PlanResources::connectChannels(const std::function<ProxyService&()>& proxy, uint64_t serial) {
  const bool gpu = backend_.onGpu();
  transports_ = TransportFlags(gpu ? Transport::kCudaIpc : Transport::kTcp);
  const std::vector<Channel>& channels = program().channels;
  // Tags in the plan's order: the i-th channel of a type from a to b pairs with the i-th from b to a.
  std::map<std::pair<int, ChannelType>, uint64_t> ordinals;  // channels of a type to a peer so far
  std::vector<uint64_t> tags;
  std::set<int> peers;
  std::vector<Transport> portTransports(channels.size(), Transport::kTcp);  // by channel index
  for (size_t i = 0; i < channels.size(); ++i) {  // refused before any setup message: no peer is left waiting
    if (channels[i].type != ChannelType::kPort) continue;
    portTransports[i] = portTransport(communicator_, int(channels[i].peer), gpu);
    if (gpu && portTransports[i] != Transport::kIb) {
      requireEagerLoading(plan_, communicator_.rank(), channels[i], portTransports[i]);
    }
  }
  for (const Channel& channel : channels) {
    if (channel.type == ChannelType::kSwitch) {
      throw Error(ErrorCategory::kInvalidPlan,
                  "plan '" + plan_.name + "', rank " + std::to_string(communicator_.rank()) + ", channel " +
                      std::to_string(channel.id) + ": switch channels (NVLS) are not run by this executor");
    }
    peers.insert(int(channel.peer));
    const uint64_t ordinal = ordinals[{int(channel.peer), channel.type}]++;
    tags.push_back(setupTag(serial, (ordinal << 2) | (channel.type == ChannelType::kPort ? 1 : 0)));
  }
  // Each setup sends to the peer, then waits for the peer's message. Taken in the plan's order, a plan
  // whose ranks list their peers rotated (rank r's first channel to r + 1) waits in a ring forever; in
  // ascending order of peer no rank can wait on one that waits, in turn, on a lower rank it has passed.
  std::vector<size_t> order(channels.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return channels[a].peer < channels[b].peer; });
  channels_.assign(channels.size(), ChannelResources{});
  for (size_t index : order) {
    const Channel& channel = channels[index];
    ChannelResources& resources = channels_[index];
    resources.type = channel.type;
    resources.peer = int(channel.peer);
    if (channel.type == ChannelType::kMemory) {
      resources.transport = gpu ? Transport::kCudaIpc : Transport::kTcp;
      resources.memory = std::make_shared<MemorySemaphore>(communicator_, resources.peer, tags[index]);
    } else {
      resources.transport = portTransports[index];
      transports_ = transports_ | resources.transport;
      resources.host = std::make_shared<HostSemaphore>(
          communicator_, communicator_.connect(resources.peer, resources.transport, tags[index]), tags[index]);
      proxy_ = &proxy();
      resources.proxySemaphore = proxy_->addSemaphore(resources.host);
    }
  }
  peers_.assign(peers.begin(), peers.end());
}

bool PlanResources::proxyCallsCuda() const {
  return std::any_of(channels_.begin(), channels_.end(), [](const ChannelResources& channel) {
    return channel.type == ChannelType::kPort && channel.transport == Transport::kCudaIpc;
  });
}

PlanResources::~PlanResources() {
  if (!proxy_) return;
  std::vector<uint32_t> semaphores;
  for (const ChannelResources& channel : channels_) {
    if (channel.type == ChannelType::kPort) semaphores.push_back(channel.proxySemaphore);
  }
  proxy_->remove({}, semaphores);
}

bool PlanResources::reserveScratch(uint64_t bytes) {
  if (bytes <= scratchBytes_) return false;
  // Grow geometrically (at least 1 MiB) so a sweep of sizes rebuilds rarely.
  uint64_t capacity = std::max<uint64_t>(scratchBytes_, 1 << 20);
  while (capacity < bytes) capacity *= 2;
  scratch_.reset();
  scratch_ = backend_.allocatePeerVisible(capacity);
  scratchBytes_ = capacity;
  // A port channel's staging area mirrors the peer's scratch, which grew alike.
  for (ChannelResources& channel : channels_) {
    if (channel.type == ChannelType::kPort) channel.staging = backend_.allocate(capacity);
  }
  return true;
}

}  // namespace loom
