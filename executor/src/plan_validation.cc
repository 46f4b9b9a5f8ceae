#include "plan_validation.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "counted_scratch.hpp"
#include "json_path.hpp"
#include "loom/error.hpp"
#include "op_spec.hpp"

namespace loom {
namespace {

std::string quotedName(std::string_view name) { return "\"" + std::string(name) + "\""; }

class Validator {
 public:
  Validator(const Plan& plan, const std::string& origin) : plan_(plan), origin_(origin) {}

  void run() {
    const JsonPath root;
    checkWorld(root);
    const JsonPath gpusPath = root.field("gpus");
    for (size_t g = 0; g < plan_.gpus.size(); ++g) {
      const JsonPath gpuPath = gpusPath.at(g);
      checkGpu(plan_.gpus[g], gpuPath);
    }
    checkChannelPairs(gpusPath);
  }

 private:
  [[noreturn]] void fail(const JsonPath& path, const std::string& detail) const {
    throw PlanError(origin_, path.str(), detail);
  }

  std::string outsideWorld(uint32_t rank) const {
    return "rank " + std::to_string(rank) + " is outside the world (world_size " + std::to_string(plan_.worldSize) +
           ")";
  }

  void checkWorld(const JsonPath& root) {
    if (plan_.gpus.size() != plan_.worldSize) {
      fail(root.field("gpus"), "has " + std::to_string(plan_.gpus.size()) + " programs but world_size is " +
                                   std::to_string(plan_.worldSize) + "; expected one program per rank");
    }
    if (plan_.ranksPerNode > plan_.worldSize || plan_.worldSize % plan_.ranksPerNode != 0) {
      fail(root.field("ranks_per_node"),
           std::to_string(plan_.ranksPerNode) + " does not divide world_size " + std::to_string(plan_.worldSize));
    }
    if (plan_.maxMessageBytes < plan_.minMessageBytes) {
      fail(root.field("max_message_bytes"), std::to_string(plan_.maxMessageBytes) + " is below min_message_bytes " +
                                                std::to_string(plan_.minMessageBytes));
    }
    if (plan_.collective == Collective::kBroadcast && !plan_.root) {
      fail(root.field("root"), "missing required field (a broadcast names its root rank)");
    }
    if (plan_.collective == Collective::kReduce && !plan_.root) {
      fail(root.field("root"), "missing required field (a reduce names its root rank)");
    }
    if (plan_.root && *plan_.root >= plan_.worldSize) fail(root.field("root"), outsideWorld(*plan_.root));
    if (plan_.collective == Collective::kAllToAllV && plan_.inplace) {
      fail(root.field("inplace"),
           "an \"alltoallv\" plan runs out of place only (an input entry may overlap an "
           "output entry in place)");
    }
    if (plan_.collective == Collective::kAllToAllV && plan_.protocol == Protocol::kLL &&
        plan_.maxMessageBytes > kMaxPacketEntryBytes) {
      // Each scratch slot holds a whole entry's packets (twice its bytes) in each of two halves.
      fail(root.field("max_message_bytes"), "an \"ll\" alltoallv plan holds entries of up to " +
                                                std::to_string(kMaxPacketEntryBytes) + " bytes in its scratch, got " +
                                                std::to_string(plan_.maxMessageBytes));
    }

    const JsonPath gpusPath = root.field("gpus");
    rankToGpu_.assign(plan_.worldSize, -1);
    for (size_t g = 0; g < plan_.gpus.size(); ++g) {
      const JsonPath gpuPath = gpusPath.at(g);
      const GpuProgram& gpu = plan_.gpus[g];
      if (gpu.rank >= plan_.worldSize) fail(gpuPath.field("id"), outsideWorld(gpu.rank));
      if (rankToGpu_[gpu.rank] >= 0) {
        fail(gpuPath.field("id"), "rank " + std::to_string(gpu.rank) + " already has a program at gpus[" +
                                      std::to_string(rankToGpu_[gpu.rank]) + "]");
      }
      rankToGpu_[gpu.rank] = static_cast<int>(g);
      // Every rank cuts its buffers alike, so that one chunk size serves every rank of a call.
      const GpuProgram& first = plan_.gpus[0];
      if (gpu.inputChunks != first.inputChunks) {
        fail(gpuPath.field("input_chunks"), std::to_string(gpu.inputChunks) + " differs from gpus[0].input_chunks " +
                                                std::to_string(first.inputChunks) +
                                                "; every rank cuts its buffers alike");
      }
      if (gpu.outputChunks != first.outputChunks) {
        fail(gpuPath.field("output_chunks"), std::to_string(gpu.outputChunks) + " differs from gpus[0].output_chunks " +
                                                 std::to_string(first.outputChunks) +
                                                 "; every rank cuts its buffers alike");
      }
    }
    checkBufferShapes(gpusPath.at(0));
  }

  // The collective fixes how output size relates to input size; chunks are all the same size.
  void checkBufferShapes(const JsonPath& gpuPath) {
    const GpuProgram& gpu = plan_.gpus[0];
    const uint64_t in = gpu.inputChunks, out = gpu.outputChunks, n = plan_.worldSize;
    const std::string name = quotedName(collectiveName(plan_.collective));
    const std::string article = name[1] == 'a' ? "an " : "a ";  // "an \"allgather\"", "a \"reducescatter\""
    auto mismatch = [&](const char* field, uint64_t expected, const std::string& rule) {
      fail(gpuPath.field(field), article + name + " plan needs " + rule + " = " + std::to_string(expected) + ", got " +
                                     std::to_string(field[0] == 'i' ? in : out));
    };
    switch (plan_.collective) {
      case Collective::kAllReduce:
      case Collective::kBroadcast:
      case Collective::kReduce:
      case Collective::kSendRecv:
        if (out != in) mismatch("output_chunks", in, "output_chunks = input_chunks");
        break;
      case Collective::kAllGather:
        if (out != n * in) mismatch("output_chunks", n * in, "output_chunks = world_size x input_chunks");
        break;
      case Collective::kReduceScatter:
        if (in != n * out) mismatch("input_chunks", n * out, "input_chunks = world_size x output_chunks");
        break;
      case Collective::kAllToAll:
      case Collective::kAllToAllV:
        if (out != in) mismatch("output_chunks", in, "output_chunks = input_chunks");
        if (in % n != 0) {
          fail(gpuPath.field("input_chunks"), article + name + " plan needs input_chunks divisible by world_size " +
                                                  std::to_string(n) + ", got " + std::to_string(in));
        }
        break;
    }
  }

  template <typename Item, typename Id>
  void checkUniqueIds(const std::vector<Item>& items, Id id, const JsonPath& listPath, const char* what) {
    std::unordered_map<uint32_t, size_t> seen;
    for (size_t i = 0; i < items.size(); ++i) {
      auto [it, fresh] = seen.emplace(id(items[i]), i);
      if (!fresh) {
        const JsonPath itemPath = listPath.at(i);
        fail(itemPath.field("id"), std::string(what) + " " + std::to_string(id(items[i])) +
                                       " is declared twice (first at index " + std::to_string(it->second) + ")");
      }
    }
  }

  void checkGpu(const GpuProgram& gpu, const JsonPath& gpuPath) {
    const JsonPath channelsPath = gpuPath.field("channels");
    checkUniqueIds(
        gpu.channels, [](const Channel& c) { return c.id; }, channelsPath, "channel");
    for (size_t c = 0; c < gpu.channels.size(); ++c) {
      const JsonPath channelPath = channelsPath.at(c);
      checkChannel(gpu, gpu.channels[c], channelPath);
    }
    checkUniqueIds(
        gpu.semaphores, [](const Semaphore& s) { return s.id; }, gpuPath.field("semaphores"), "semaphore");
    const JsonPath tbsPath = gpuPath.field("threadblocks");
    checkUniqueIds(
        gpu.threadblocks, [](const ThreadBlock& t) { return t.id; }, tbsPath, "thread block");
    for (size_t t = 0; t < gpu.threadblocks.size(); ++t) {
      const JsonPath tbPath = tbsPath.at(t);
      const JsonPath opsPath = tbPath.field("ops");
      const ThreadBlock& tb = gpu.threadblocks[t];
      for (size_t o = 0; o < tb.ops.size(); ++o) {
        const JsonPath opPath = opsPath.at(o);
        checkOp(gpu, tb, tb.ops[o], opPath);
      }
    }
  }

  void checkChannel(const GpuProgram& gpu, const Channel& channel, const JsonPath& path) {
    if (channel.type == ChannelType::kSwitch) {
      const JsonPath ranksPath = path.field("ranks");
      for (size_t i = 0; i < channel.ranks.size(); ++i) {
        if (channel.ranks[i] >= plan_.worldSize) {
          const JsonPath rankPath = ranksPath.at(i);
          fail(rankPath, outsideWorld(channel.ranks[i]));
        }
      }
      if (std::find(channel.ranks.begin(), channel.ranks.end(), gpu.rank) == channel.ranks.end()) {
        fail(ranksPath, "the multicast group must include this rank (" + std::to_string(gpu.rank) + ")");
      }
      return;
    }
    const JsonPath peerPath = path.field("peer");
    if (channel.peer >= plan_.worldSize) fail(peerPath, outsideWorld(channel.peer));
    if (channel.peer == gpu.rank) {
      fail(peerPath,
           "a channel connects two different ranks, but " + std::to_string(channel.peer) + " is this rank itself");
    }
  }

  const Channel* findChannel(const GpuProgram& gpu, uint32_t id) const {
    for (const Channel& channel : gpu.channels) {
      if (channel.id == id) return &channel;
    }
    return nullptr;
  }

  const Channel& channelFor(const GpuProgram& gpu, uint32_t id, uint8_t allowed, const OpSpec& spec,
                            const JsonPath& path) const {
    const Channel* channel = findChannel(gpu, id);
    if (channel == nullptr) {
      fail(path, "channel " + std::to_string(id) + " is not declared by rank " + std::to_string(gpu.rank));
    }
    if (!(allowed & channelBit(channel->type))) {
      fail(path, "channel " + std::to_string(id) + " is a " + std::string(channelTypeName(channel->type)) +
                     " channel, but " + quotedName(spec.name) + " needs " + channelMaskText(allowed) + " here");
    }
    return *channel;
  }

  void checkRef(const GpuProgram& gpu, const ChunkRef& ref, const OpSpec& spec, bool isSource, uint32_t opCount,
                const JsonPath& path) {
    uint32_t limit = gpu.chunks(ref.buffer);
    const GpuProgram* owner = nullptr;  // the peer whose buffer a remote chunk lives in
    bool multicast = false;
    if (ref.isRemote()) {
      const JsonPath channelPath = path.field("channel");
      const Channel& channel =
          channelFor(gpu, ref.channel, isSource ? spec.readChannels : spec.writeChannels, spec, channelPath);
      if (channel.type == ChannelType::kSwitch) {
        if (ref.buffer != channel.buffer) {
          fail(path.field("buffer"), "switch channel " + std::to_string(channel.id) + " is bound to the " +
                                         std::string(bufferName(channel.buffer)) + " buffer, got " +
                                         quotedName(bufferName(ref.buffer)));
        }
        multicast = true;
      } else {
        owner = &plan_.gpus[rankToGpu_[channel.peer]];
        limit = owner->chunks(ref.buffer);
      }
    }
    // Messages are built only on failure: this runs for every chunk of a plan.
    auto where = [&] {
      const std::string buffer(bufferName(ref.buffer));
      std::string text = multicast ? "the multicast " + buffer + " buffer"
                         : owner   ? "rank " + std::to_string(owner->rank) + "'s " + buffer + " buffer"
                                   : "the " + buffer + " buffer";
      return text + " (" + std::to_string(limit) + " chunks)";
    };
    if (ref.index >= limit) fail(path.field("index"), std::to_string(ref.index) + " is outside " + where());
    if (uint64_t{ref.index} + ref.count > limit) {
      fail(path.field("count"), "chunks " + std::to_string(ref.index) + " to " +
                                    std::to_string(uint64_t{ref.index} + ref.count - 1) + " run past the end of " +
                                    where());
    }
    if (plan_.collective == Collective::kAllToAllV) checkCallSizedRef(gpu, ref, spec, isSource, path);
    // Chunks move one for one: every chunk range of an op spans the same number of chunks.
    if (ref.count != opCount) {
      fail(path.field("count"), std::to_string(ref.count) + " differs from the op's other chunk ranges (" +
                                    std::to_string(opCount) + " chunks)");
    }
  }

  // In an alltoallv plan every byte range is an entry of the call's table: this rank's own input and output
  // entries, and a peer's output entry (which the peer publishes). Nothing else has a size to cut, but the
  // packet regions of an "ll" plan: a put_packet into a peer's scratch slot, an unpack_packet out of this
  // rank's (each slot holds one entry of up to max_message_bytes, led by its count).
  void checkCallSizedRef(const GpuProgram& gpu, const ChunkRef& ref, const OpSpec& spec, bool isSource,
                         const JsonPath& path) const {
    const bool packetRegion = plan_.protocol == Protocol::kLL && ref.buffer == BufferType::kScratch &&
                              ((spec.type == OpType::kPutPacket && !isSource && ref.isRemote()) ||
                               (spec.type == OpType::kUnpackPacket && isSource && !ref.isRemote()));
    if (packetRegion) {
      // The executor writes a region's packets straight into the peer's scratch (entry_packets.hpp): through a
      // memory channel only.
      if (ref.isRemote()) channelFor(gpu, ref.channel, channelBit(ChannelType::kMemory), spec, path.field("channel"));
      return;
    }
    if (ref.buffer == BufferType::kScratch) {
      fail(path.field("buffer"),
           "an \"alltoallv\" plan has no scratch chunks: its entries are sized per call "
           "(but for an \"ll\" plan's put_packet into a peer's scratch and unpack_packet "
           "out of its own)");
    }
    if (ref.isRemote() && (isSource || ref.buffer != BufferType::kOutput)) {
      fail(path,
           "an \"alltoallv\" plan reaches a peer only by writing into its output entries (the ones the peer "
           "publishes); got a remote " +
               std::string(isSource ? "source" : "destination") + " in its " + std::string(bufferName(ref.buffer)));
    }
  }

  void checkOp(const GpuProgram& gpu, const ThreadBlock& tb, const Op& op, const JsonPath& path) {
    const OpSpec& spec = opSpec(op.type);
    if (op.publish && plan_.collective != Collective::kAllToAllV) {
      fail(path.field("publish"), "publish is for \"alltoallv\" plans, whose outputs are sized per call");
    }
    const bool entryPackets = op.type == OpType::kPutPacket || op.type == OpType::kUnpackPacket;
    if (plan_.collective == Collective::kAllToAllV &&
        ((spec.packet && !entryPackets) || spec.reduction || op.type == OpType::kPipeline)) {
      fail(path.field("op"), quotedName(spec.name) +
                                 " is not an op of an \"alltoallv\" plan (it moves whole call-"
                                 "sized entries: copy, put, put_packet, unpack_packet and synchronisation)");
    }
    if (spec.packet && plan_.protocol != Protocol::kLL) {
      fail(path.field("op"), quotedName(spec.name) + " needs the \"ll\" protocol, but this plan's protocol is " +
                                 quotedName(protocolName(plan_.protocol)));
    }
    uint32_t count = 0;
    if (op.src)
      count = op.src->count;
    else if (!op.srcs.empty())
      count = op.srcs[0].count;
    else if (op.dst)
      count = op.dst->count;
    else if (!op.dsts.empty())
      count = op.dsts[0].count;

    if (op.src) checkRef(gpu, *op.src, spec, true, count, path.field("src"));
    checkRefList(gpu, op.srcs, spec, true, count, path.field("srcs"));
    if (op.dst) checkRef(gpu, *op.dst, spec, false, count, path.field("dst"));
    if (op.packetDst) checkRef(gpu, *op.packetDst, spec, false, count, path.field("packet_dst"));
    checkRefList(gpu, op.dsts, spec, false, count, path.field("dsts"));

    const JsonPath channelsPath = path.field("channels");
    for (size_t i = 0; i < op.channels.size(); ++i) {
      const JsonPath itemPath = channelsPath.at(i);
      channelFor(gpu, op.channels[i], spec.writeChannels, spec, itemPath);
    }
    if (op.type == OpType::kBarrier) checkBarrier(gpu, tb, op, path.field("threadblocks"));
    const JsonPath semaphoresPath = path.field("semaphores");
    for (size_t i = 0; i < op.semaphores.size(); ++i) {
      bool declared = std::any_of(gpu.semaphores.begin(), gpu.semaphores.end(),
                                  [&](const Semaphore& s) { return s.id == op.semaphores[i]; });
      if (!declared) {
        const JsonPath itemPath = semaphoresPath.at(i);
        fail(itemPath,
             "semaphore " + std::to_string(op.semaphores[i]) + " is not declared by rank " + std::to_string(gpu.rank));
      }
    }
    const JsonPath bodyPath = path.field("body");
    for (size_t i = 0; i < op.body.size(); ++i) {
      const JsonPath itemPath = bodyPath.at(i);
      checkOp(gpu, tb, op.body[i], itemPath);
    }
  }

  void checkRefList(const GpuProgram& gpu, const std::vector<ChunkRef>& refs, const OpSpec& spec, bool isSource,
                    uint32_t count, const JsonPath& path) {
    for (size_t i = 0; i < refs.size(); ++i) {
      const JsonPath itemPath = path.at(i);
      checkRef(gpu, refs[i], spec, isSource, count, itemPath);
    }
  }

  void checkBarrier(const GpuProgram& gpu, const ThreadBlock& tb, const Op& op, const JsonPath& path) {
    for (size_t i = 0; i < op.threadblocks.size(); ++i) {
      bool exists = std::any_of(gpu.threadblocks.begin(), gpu.threadblocks.end(),
                                [&](const ThreadBlock& other) { return other.id == op.threadblocks[i]; });
      if (!exists) {
        const JsonPath itemPath = path.at(i);
        fail(itemPath, "thread block " + std::to_string(op.threadblocks[i]) + " does not exist on rank " +
                           std::to_string(gpu.rank));
      }
    }
    if (std::find(op.threadblocks.begin(), op.threadblocks.end(), tb.id) == op.threadblocks.end()) {
      fail(path, "does not include this thread block (" + std::to_string(tb.id) +
                     "); a thread block only waits at barriers it takes part in");
    }
  }

  // Channels pair up in declaration order: the k-th memory channel from a to b connects to the k-th
  // memory channel from b to a, so both sides must declare the same number.
  void checkChannelPairs(const JsonPath& gpusPath) {
    using PairKey = std::tuple<ChannelType, uint32_t, uint32_t>;
    using GroupKey = std::tuple<uint32_t, std::vector<uint32_t>, BufferType>;
    std::map<PairKey, uint32_t> pairs;
    std::map<GroupKey, uint32_t> groups;
    auto sortedGroup = [](const Channel& c) {
      std::vector<uint32_t> ranks = c.ranks;
      std::sort(ranks.begin(), ranks.end());
      return ranks;
    };
    for (const GpuProgram& gpu : plan_.gpus) {
      for (const Channel& c : gpu.channels) {
        if (c.type == ChannelType::kSwitch)
          ++groups[{gpu.rank, sortedGroup(c), c.buffer}];
        else
          ++pairs[{c.type, gpu.rank, c.peer}];
      }
    }
    for (size_t g = 0; g < plan_.gpus.size(); ++g) {
      const GpuProgram& gpu = plan_.gpus[g];
      const JsonPath gpuPath = gpusPath.at(g);
      const JsonPath channelsPath = gpuPath.field("channels");
      for (size_t i = 0; i < gpu.channels.size(); ++i) {
        const Channel& c = gpu.channels[i];
        const JsonPath channelPath = channelsPath.at(i);
        const std::string type(channelTypeName(c.type));
        if (c.type != ChannelType::kSwitch) {
          uint32_t mine = pairs[{c.type, gpu.rank, c.peer}];
          uint32_t theirs = pairs[{c.type, c.peer, gpu.rank}];
          if (mine != theirs) {
            fail(channelPath, "rank " + std::to_string(gpu.rank) + " declares " + std::to_string(mine) + " " + type +
                                  " channel(s) to rank " + std::to_string(c.peer) + " but rank " +
                                  std::to_string(c.peer) + " declares " + std::to_string(theirs) +
                                  " back; channels pair up in order");
          }
          continue;
        }
        std::vector<uint32_t> group = sortedGroup(c);
        uint32_t mine = groups[{gpu.rank, group, c.buffer}];
        for (uint32_t member : group) {
          uint32_t theirs = groups[{member, group, c.buffer}];
          if (theirs != mine) {
            fail(channelPath, "rank " + std::to_string(member) + " of the group declares " + std::to_string(theirs) +
                                  " matching switch channel(s) on the " + std::string(bufferName(c.buffer)) +
                                  " buffer, but rank " + std::to_string(gpu.rank) + " declares " +
                                  std::to_string(mine));
          }
        }
      }
    }
  }

  const Plan& plan_;
  const std::string& origin_;
  std::vector<int> rankToGpu_;
};

}  // namespace

void validatePlan(const Plan& plan, const std::string& origin) { Validator(plan, origin).run(); }

}  // namespace loom
