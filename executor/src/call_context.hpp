#pragma once

// One plan resolved for one message size and one set of buffers (or, shifted per call, allocations), ready to launch:
// the device program (ops, operands, channel views) in the backend's memory, this rank's buffers registered and the
// peers' registrations received (mapped, for memory channels; known to the proxy, for port channels). Building one is
// collective: every rank with a channel to this one takes part.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backend.hpp"
#include "call_agreement.hpp"
#include "inline_records.hpp"
#include "loom/communicator.hpp"
#include "loom/device/program.hpp"
#include "loom/registered_memory.hpp"
#include "plan_resources.hpp"
#include "specialize.hpp"

namespace loom {

class CallContext {
 public:
  // `bindUserBuffers`: register and exchange input and output; otherwise (peers only reach this
  // rank's scratch) the scratch registration stands in for them and the launch sets the buffers.
  // `everyRank`: every rank's buffers of the call that sets it up (call_agreement.hpp), empty when
  // not bound to user buffers.
  CallContext(PlanResources& resources, Communicator& communicator, Backend& backend, uint64_t messageBytes,
              const void* input, void* output, bool bindUserBuffers, const std::vector<RankBuffers>& everyRank,
              uint64_t serial);
  // Gives the proxy back the ids of this context's memories (and with them its mappings of peers').
  ~CallContext();
  CallContext(const CallContext&) = delete;
  CallContext& operator=(const CallContext&) = delete;

  const device::Program& program() const { return program_; }
  // Sets `program`'s peer shifts for a call whose ranks pass `everyRank`: each peer's input and output
  // addresses against those this context was set up with (the same allocations, or the same addresses).
  void shiftPeers(device::Program& program, const std::vector<RankBuffers>& everyRank) const;
  // Whether a launch of it was captured in a CUDA graph: the graph may replay it at any time, so the
  // executor keeps it (and what it uses) for as long as the executor lives.
  bool captured() const { return captured_; }
  void markCaptured() { captured_ = true; }
  // Every rank's buffers of the call that set it up (empty: not bound to user buffers).
  const std::vector<RankBuffers>& setUpWith() const { return setUpWith_; }
  uint64_t scratchBytes() const { return scratchBytes_; }
  // How many of this context's data ops run specialised and how many generically.
  const TransferCounts& transfers() const { return transfers_; }
  // Threads per block to launch with: the plan's, fewer for a fast-path program with little data.
  uint32_t threads() const { return threads_; }
  // Whether the program travels in the inline kernel's parameters (inline_records.hpp).
  bool inlined() const { return inline_.has_value(); }
  // The inline program of a call launched with `program` (its buffers and peer shifts set), or null.
  const device::InlineProgram* inlineProgram(const device::Program& program) {
    return inlined() ? &inline_->forCall(program, hostViews_.data()) : nullptr;
  }

 private:
  struct PeerBuffers {
    RegisteredMemory buffers[3];  // input, output, scratch
    uint32_t proxyIds[3] = {0, 0, 0};
  };
  void exchange(PlanResources& resources, Communicator& communicator, uint64_t serial);
  uint32_t addToProxy(const RegisteredMemory& memory);
  void upload(PlanResources& resources, Backend& backend, const struct ResolvedProgram& resolved);

  // The plan's scratch and port-channel staging areas it was set up with, kept while it lives though
  // the plan's grow (a captured launch still uses them). First, so that it goes last.
  std::vector<std::shared_ptr<void>> memoryKept_;
  RegisteredMemory local_[3];
  std::vector<RegisteredMemory> staging_;  // per channel (port channels only)
  uint32_t localProxyIds_[3] = {0, 0, 0};
  ProxyService* proxy_ = nullptr;        // port channels only
  std::vector<uint32_t> proxyMemories_;  // every id it added to proxy_
  std::vector<int> peerOf_;              // rank -> index in peers_, -1 when no channel
  std::vector<PeerBuffers> peers_;
  std::vector<int> peerRanks_;          // index in peers_ (a ChannelView's shiftSlot) -> rank
  std::vector<RankBuffers> setUpWith_;  // every rank's buffers at setup (empty: not bound to them)
  std::shared_ptr<void> deviceData_;
  std::vector<device::ChannelView> hostViews_;  // the channel views, as uploaded
  std::optional<InlineRecords> inline_;         // the fast path's programs only
  device::Program program_{};
  uint64_t scratchBytes_ = 0;
  TransferCounts transfers_;
  uint32_t threads_ = 0;
  bool captured_ = false;
};

}  // namespace loom
