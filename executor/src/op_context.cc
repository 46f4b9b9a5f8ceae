#include "op_context.hpp"

#include <algorithm>
#include <set>
#include <vector>

#include "loom/rank_list.hpp"

namespace loom {
namespace {

void addPeers(const GpuProgram& gpu, const Op& op, std::set<int>& peers) {
  auto channelPeer = [&](uint32_t id) {
    for (const Channel& channel : gpu.channels) {
      if (channel.id != id) continue;
      if (channel.type == ChannelType::kSwitch) {
        for (uint32_t rank : channel.ranks) peers.insert(int(rank));
      } else {
        peers.insert(int(channel.peer));
      }
    }
  };
  auto chunk = [&](const std::optional<ChunkRef>& ref) {
    if (ref && ref->isRemote()) channelPeer(ref->channel);
  };
  chunk(op.src);
  chunk(op.dst);
  chunk(op.packetDst);
  for (const ChunkRef& ref : op.srcs) chunk(ref);
  for (const ChunkRef& ref : op.dsts) chunk(ref);
  for (uint32_t id : op.channels) channelPeer(id);
  for (const Op& inner : op.body) addPeers(gpu, inner, peers);
}

// A packet op reads what its peers' puts left in this rank's scratch: the peers are those the rank's other
// ops put to over the same channels, which the op itself does not name. The peers of every channel the
// rank has then stand in for them.
bool readsPacketsLocally(const Op& op) {
  switch (op.type) {
    case OpType::kCopyPacket:
    case OpType::kUnpackPacket:
    case OpType::kReducePacket:
    case OpType::kReduceSendPacket:
    case OpType::kReduceCopyPacket:
    case OpType::kReduceCopySendPacket:
      return true;
    default:
      return false;
  }
}

}  // namespace

const Op* locatePlanOp(const Plan& plan, uint32_t rank, int32_t block, int32_t op, uint32_t* threadBlockId) {
  if (rank >= plan.gpus.size() || block < 0 || op < 0) return nullptr;
  std::vector<const ThreadBlock*> blocks;
  for (const ThreadBlock& tb : plan.gpu(rank).threadblocks) blocks.push_back(&tb);
  std::sort(blocks.begin(), blocks.end(), [](auto* a, auto* b) { return a->id < b->id; });
  if (size_t(block) >= blocks.size() || size_t(op) >= blocks[size_t(block)]->ops.size()) return nullptr;
  if (threadBlockId != nullptr) *threadBlockId = blocks[size_t(block)]->id;
  return &blocks[size_t(block)]->ops[size_t(op)];
}

std::string planOpName(const Op& op, uint32_t threadBlockId, int32_t index) {
  std::string text = "thread block " + std::to_string(threadBlockId) + "'s op " + std::to_string(index) + ", " +
                     std::string(opTypeName(op.type));
  if (op.location) text += " at " + op.location->file + ":" + std::to_string(op.location->line);
  return text;
}

std::string opContext(const Plan& plan, uint32_t rank, int32_t block, int32_t op) {
  uint32_t threadBlockId = 0;
  const Op* located = locatePlanOp(plan, rank, block, op, &threadBlockId);
  if (located == nullptr) return "";
  const GpuProgram& gpu = plan.gpu(rank);
  const Op& found = *located;
  std::string text = "; that is " + planOpName(found, threadBlockId, op);
  std::set<int> peers;
  addPeers(gpu, found, peers);
  if (peers.empty() && readsPacketsLocally(found)) {
    for (const Channel& channel : gpu.channels) {
      if (channel.type != ChannelType::kSwitch) peers.insert(int(channel.peer));
    }
  }
  if (!peers.empty()) {
    const std::string ranks = rankList(std::vector<int>(peers.begin(), peers.end()));
    text += readsPacketsLocally(found) ? ", reading the packets of " + ranks : ", on its channels to " + ranks;
  }
  return text;
}

}  // namespace loom
