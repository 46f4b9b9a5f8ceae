#include "call_context.hpp"

#include <cstring>
#include <string>

#include "loom/error.hpp"
#include "resolve.hpp"
#include "specialize.hpp"

namespace loom {
namespace {

uint64_t alignUp(uint64_t value) { return (value + 15) / 16 * 16; }

}  // namespace

CallContext::CallContext(PlanResources& resources, Communicator& communicator, Backend& backend, uint64_t messageBytes,
                         const void* input, void* output, bool bindUserBuffers,
                         const std::vector<RankBuffers>& everyRank, uint64_t serial)
    : setUpWith_(everyRank) {
  const uint32_t rank = uint32_t(communicator.rank());
  memoryKept_.push_back(resources.scratchMemory());
  for (const ChannelResources& channel : resources.channels()) {
    if (channel.staging) memoryKept_.push_back(channel.staging);
  }
  ResolvedProgram resolved = resolve(resources.plan(), rank, messageBytes);
  threads_ = resources.plan().threadsPerBlock;
  // A counted plan's byte ranges are read at run time: nothing to specialise.
  if (fastPathEnabled() && resources.plan().collective != Collective::kAllToAllV) {
    // The fast path: the program specialised, when every op of it specialises and it fits the inline
    // kernel (its parameters, its block size), launched with as many threads as its data needs; any
    // other program runs as resolved, in the generic kernel.
    ResolvedProgram fast = resolved;
    specialize(fast);
    const uint32_t threads = launchThreads(fast, threads_);
    InlineRecords records(fast);
    if (!records.empty() && threads <= device::kMaxInlineThreads) {
      resolved = std::move(fast);
      threads_ = threads;
      inline_.emplace(std::move(records));
    }
  }
  transfers_ = countTransfers(resolved);
  scratchBytes_ = resolved.scratchBytes;
  const TransportFlags transports = resources.transports();
  // Registrations refer to the user's memory, not a copy: nothing is copied per call.
  local_[2] = communicator.registerMemory(resources.scratch(), resources.scratchBytes(), transports);
  if (bindUserBuffers) {
    // The buffers' bytes as the call gave them: the resolved sizes, or a counted call's whole buffers.
    local_[0] = communicator.registerMemory(const_cast<void*>(input), everyRank[rank].inputBytes, transports);
    local_[1] = communicator.registerMemory(output, everyRank[rank].outputBytes, transports);
  } else {
    local_[0] = local_[1] = local_[2];
  }
  exchange(resources, communicator, serial);
  upload(resources, backend, resolved);
  program_.buffers[0] = const_cast<void*>(input);
  program_.buffers[1] = output;
  program_.buffers[2] = resources.scratch();
  program_.callCounts = resources.callCounts();
  program_.semaphores = resources.semaphores();
  program_.barriers = resources.barriers();
  program_.wait = communicator.deviceDiagnostics().waitContext();
  program_.blocks = resolved.blocks();
}

CallContext::~CallContext() {
  if (proxy_) proxy_->remove(proxyMemories_);
}

uint32_t CallContext::addToProxy(const RegisteredMemory& memory) {
  proxyMemories_.push_back(proxy_->addMemory(memory));
  return proxyMemories_.back();
}

// Each rank sends its three registrations to every peer it has a channel to and receives theirs.
void CallContext::exchange(PlanResources& resources, Communicator& communicator, uint64_t serial) {
  peerOf_.assign(communicator.worldSize(), -1);
  for (int peer : resources.peers()) {
    for (int k = 0; k < 3; ++k) communicator.sendMemory(local_[k], peer, setupTag(serial, uint64_t(k)));
  }
  for (int peer : resources.peers()) {
    peerOf_[peer] = int(peers_.size());
    peerRanks_.push_back(peer);
    PeerBuffers& theirs = peers_.emplace_back();
    for (int k = 0; k < 3; ++k) theirs.buffers[k] = communicator.recvMemory(peer, setupTag(serial, uint64_t(k)));
  }
  if (ProxyService* proxy = resources.proxy()) {
    proxy_ = proxy;
    for (int k = 0; k < 3; ++k) localProxyIds_[k] = addToProxy(local_[k]);
    staging_.resize(resources.channels().size());
    for (size_t i = 0; i < staging_.size(); ++i) {
      const ChannelResources& channel = resources.channels()[i];
      if (channel.staging) {
        staging_[i] =
            communicator.registerMemory(channel.staging.get(), resources.scratchBytes(), resources.transports());
      }
    }
    for (PeerBuffers& theirs : peers_) {
      for (int k = 0; k < 3; ++k) theirs.proxyIds[k] = addToProxy(theirs.buffers[k]);
    }
  }
}

void CallContext::shiftPeers(device::Program& program, const std::vector<RankBuffers>& everyRank) const {
  if (setUpWith_.empty() || peerRanks_.size() > device::kMaxShiftedPeers) return;
  for (size_t slot = 0; slot < peerRanks_.size(); ++slot) {
    const auto rank = size_t(peerRanks_[slot]);
    program.peerShifts[slot][0] = int64_t(everyRank[rank].input - setUpWith_[rank].input);
    program.peerShifts[slot][1] = int64_t(everyRank[rank].output - setUpWith_[rank].output);
  }
}

// Ops, operands, block starts and channel views go into one allocation of the backend's memory.
void CallContext::upload(PlanResources& resources, Backend& backend, const ResolvedProgram& resolved) {
  const std::vector<ChannelResources>& channels = resources.channels();
  std::vector<device::ChannelView> views(channels.size());
  for (size_t i = 0; i < channels.size(); ++i) {
    const ChannelResources& channel = channels[i];
    device::ChannelView& view = views[i];
    const PeerBuffers& theirs = peers_[peerOf_[channel.peer]];
    view.peer = channel.peer;
    // Beyond Program::peerShifts' rows the context is keyed by addresses and every shift is 0.
    view.shiftSlot = uint32_t(peerOf_[channel.peer]) < device::kMaxShiftedPeers ? uint32_t(peerOf_[channel.peer]) : 0;
    if (channel.type == ChannelType::kMemory) {
      view.memory = channel.memory->deviceHandle();
      view.memory.waitContext.channel = int32_t(resources.program().channels[i].id);
      view.memory.waitContext.peer = channel.peer;
      for (int k = 0; k < 3; ++k) view.peerBuffers[k] = theirs.buffers[k].data();
    } else {
      view.isPort = 1;
      view.port = resources.proxy()->portChannel(channel.proxySemaphore, theirs.proxyIds[1], localProxyIds_[0],
                                                 int(resources.program().channels[i].id), &resources.communicator());
      for (int k = 0; k < 3; ++k) view.portMemory[k] = theirs.proxyIds[k];
      view.staging = channel.staging.get();
      view.stagingMemory = addToProxy(staging_[i]);
    }
  }
  for (int k = 0; k < 3; ++k) program_.portBuffers[k] = localProxyIds_[k];

  const uint64_t opsBytes = alignUp(resolved.ops.size() * sizeof(device::Op));
  const uint64_t operandsBytes = alignUp(resolved.operands.size() * sizeof(device::Operand));
  const uint64_t blocksBytes = alignUp(resolved.blockOps.size() * sizeof(uint32_t));
  const uint64_t viewsBytes = alignUp(views.size() * sizeof(device::ChannelView));
  std::vector<uint8_t> blob(opsBytes + operandsBytes + blocksBytes + viewsBytes);
  uint8_t* at = blob.data();
  std::memcpy(at, resolved.ops.data(), resolved.ops.size() * sizeof(device::Op));
  std::memcpy(at + opsBytes, resolved.operands.data(), resolved.operands.size() * sizeof(device::Operand));
  std::memcpy(at + opsBytes + operandsBytes, resolved.blockOps.data(), resolved.blockOps.size() * sizeof(uint32_t));
  std::memcpy(at + opsBytes + operandsBytes + blocksBytes, views.data(), views.size() * sizeof(device::ChannelView));
  hostViews_ = std::move(views);
  deviceData_ = backend.allocate(blob.size());
  backend.upload(deviceData_.get(), blob.data(), blob.size());
  auto* base = static_cast<uint8_t*>(deviceData_.get());
  program_.ops = reinterpret_cast<const device::Op*>(base);
  program_.operands = reinterpret_cast<const device::Operand*>(base + opsBytes);
  program_.blockOps = reinterpret_cast<const uint32_t*>(base + opsBytes + operandsBytes);
  program_.channels = reinterpret_cast<device::ChannelView*>(base + opsBytes + operandsBytes + blocksBytes);
}

}  // namespace loom
