#include "resolve.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "counted_scratch.hpp"
#include "loom/error.hpp"
#include "op_spec.hpp"

namespace loom {
namespace {

using device::OpCode;
using device::Operand;

struct Range {
  Operand operand{};
  uint64_t bytes = 0;
  bool data = false;  // input or output: its length counts; scratch chunks are always whole
};

class Resolver {
 public:
  Resolver(const Plan& plan, uint32_t rank, uint64_t messageBytes)
      : plan_(plan), gpu_(plan.gpu(rank)), rank_(rank), messageBytes_(messageBytes), layout_(plan, messageBytes) {}

  ResolvedProgram run() {
    out_.inputBytes = layout_.inputBytes();
    out_.outputBytes = layout_.outputBytes();
    if (counted()) countedScratch_ = countedScratch(plan_);
    out_.scratchBytes = counted() ? countedScratch_.bytes() : layout_.scratchBytes(gpu_.scratchChunks);
    for (size_t i = 0; i < gpu_.channels.size(); ++i) channelIndex_[gpu_.channels[i].id] = uint16_t(i);
    if (counted()) mailboxOfPeer_ = pairedChannelIndices();
    for (size_t i = 0; i < gpu_.semaphores.size(); ++i) {
      semaphoreIndex_[gpu_.semaphores[i].id] = uint32_t(i);
      out_.semaphoreInitialValues.push_back(gpu_.semaphores[i].initialValue);
    }
    // The GPU runs one block per thread block in id order.
    std::vector<const ThreadBlock*> blocks;
    for (const ThreadBlock& tb : gpu_.threadblocks) blocks.push_back(&tb);
    std::sort(blocks.begin(), blocks.end(), [](auto* a, auto* b) { return a->id < b->id; });
    for (const ThreadBlock* tb : blocks) {
      tb_ = tb->id;
      out_.blockOps.push_back(uint32_t(out_.ops.size()));
      for (size_t i = 0; i < tb->ops.size(); ++i) {
        const Op& op = tb->ops[i];
        opIndex_ = uint32_t(i);
        if (op.type != OpType::kPipeline) {
          emit(op, Iteration{});
          continue;
        }
        opType_ = op.type;
        const Iteration whole = iterationsOf(op);
        for (uint32_t piece = 0; piece < whole.count; ++piece) {
          for (const Op& inner : op.body) emit(inner, Iteration{piece, whole.count, whole.unitBytes});
        }
      }
      flushAtEnd();
    }
    out_.blockOps.push_back(uint32_t(out_.ops.size()));
    out_.barriers = uint32_t(barrierIndex_.size());
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& detail, ErrorCategory category = ErrorCategory::kInvalidPlan) const {
    throw Error(category, "plan '" + plan_.name + "', rank " + std::to_string(rank_) + ", tb " + std::to_string(tb_) +
                              ", op " + std::to_string(opIndex_) + " (" + std::string(opTypeName(opType_)) +
                              "): " + detail);
  }

  const Channel& channel(uint32_t id) const { return gpu_.channels[channelIndex_.at(id)]; }

  // A counted call (an alltoallv plan): byte ranges are entries of the call's table, read at run time.
  bool counted() const { return plan_.collective == Collective::kAllToAllV; }

  // For each of this rank's channels, the index its peer gives the paired channel (the i-th channel of a
  // type from a to b pairs with the i-th from b to a): where this rank's entry goes in the peer's mailboxes.
  std::vector<uint32_t> pairedChannelIndices() const {
    std::vector<uint32_t> paired;
    std::map<std::pair<uint32_t, ChannelType>, uint32_t> ordinal;  // channels of a type to a peer so far
    for (const Channel& mine : gpu_.channels) {
      uint32_t skip = ordinal[{mine.peer, mine.type}]++;
      const std::vector<Channel>& theirs = plan_.gpu(mine.peer).channels;
      size_t j = 0;
      for (; j < theirs.size(); ++j) {
        if (theirs[j].peer == rank_ && theirs[j].type == mine.type && skip-- == 0) break;
      }
      if (j == theirs.size())
        fail("channel " + std::to_string(mine.id) + " has no paired channel at rank " + std::to_string(mine.peer));
      paired.push_back(uint32_t(j));
    }
    return paired;
  }

  // A part of a chunk range in nominal bytes (every chunk counted whole): [begin, end) from its start.
  struct Nominal {
    uint64_t begin = 0;
    uint64_t end = 0;
  };

  // Which part of its chunk ranges an op works on: iteration `index` of `count` of a pipeline (all of
  // them outside one). A pipeline sized in bytes cuts every range into slices of `unitBytes`.
  struct Iteration {
    uint32_t index = 0;
    uint32_t count = 1;
    uint64_t unitBytes = 0;
  };

  uint64_t alignUp(uint64_t bytes) const {
    return (bytes + layout_.alignment() - 1) / layout_.alignment() * layout_.alignment();
  }

  // A pipeline's iterations in this call: its fixed count, or as many slices of its unit (rounded up to
  // the chunk alignment) as its longest chunk range needs, as MSCCL++ counts them.
  Iteration iterationsOf(const Op& pipeline) const {
    if (pipeline.unitBytes == 0) return {0, pipeline.iterations, 0};
    const uint64_t unit = alignUp(pipeline.unitBytes);
    uint64_t longest = 0;
    for (const Op& inner : pipeline.body) {
      for (const std::optional<ChunkRef>* ref : {&inner.src, &inner.dst, &inner.packetDst}) {
        if (*ref) longest = std::max(longest, uint64_t((*ref)->count) * layout_.chunkBytes());
      }
      for (const std::vector<ChunkRef>* refs : {&inner.srcs, &inner.dsts}) {
        for (const ChunkRef& ref : *refs) longest = std::max(longest, uint64_t(ref.count) * layout_.chunkBytes());
      }
    }
    const uint64_t count = std::max<uint64_t>(1, (longest + unit - 1) / unit);
    if (count > 65536) {
      fail("a pipeline of " + std::to_string(pipeline.unitBytes) + "-byte units over " + std::to_string(longest) +
               " bytes would run " + std::to_string(count) + " iterations, more than 65536; use a larger unit_bytes",
           ErrorCategory::kInvalidArgument);
    }
    return {0, uint32_t(count), unit};
  }

  // The part of a chunk range's nominal length an iteration covers: the index-th of `count` equal
  // slices rounded up to the chunk alignment (the last takes the remainder), or bytes
  // [index * unit, (index + 1) * unit) of it, empty past its end.
  Nominal slice(const ChunkRef& ref, const Iteration& at) const {
    const uint64_t nominal = uint64_t(ref.count) * layout_.chunkBytes();
    const uint64_t width = at.unitBytes ? at.unitBytes : alignUp((nominal + at.count - 1) / at.count);
    return {std::min(uint64_t(at.index) * width, nominal), std::min(uint64_t(at.index + 1) * width, nominal)};
  }

  // The bytes a part of a chunk range covers in this call.
  Range range(const ChunkRef& ref, bool packet, Nominal part) const {
    uint32_t owner = rank_;
    if (ref.isRemote()) {
      const Channel& via = channel(ref.channel);
      if (via.type == ChannelType::kSwitch) {
        fail("switch channels (NVLS multicast) are not run by this executor; they stay opt-in and untested here");
      }
      owner = via.peer;
    }
    const uint64_t begin = layout_.position(ref.buffer, ref.index, part.begin);
    Range r;
    r.bytes = layout_.position(ref.buffer, ref.index, part.end) - begin;
    r.data = ref.buffer != BufferType::kScratch;
    r.operand.offset = begin;
    r.operand.channel = ref.isRemote() ? channelIndex_.at(ref.channel) : device::kLocalOperand;
    r.operand.buffer = uint8_t(ref.buffer);
    r.operand.packet = packet ? 1 : 0;
    if (ref.buffer == BufferType::kScratch && plan_.protocol == Protocol::kLL) {
      // LL scratch holds packets: 16 bytes for every 8 of data, in two halves (call parity).
      r.operand.offset = 2 * begin;
      r.operand.oddOffset = layout_.scratchHalfBytes(plan_.gpu(owner).scratchChunks);
    }
    return r;
  }

  // A data chunk at the end of a slot may be short (the slot does not divide evenly), while scratch
  // chunks are always whole: a range running past a short chunk has a gap in its data buffers that its
  // scratch ranges do not have. Such a part is cut at the gaps, so that every piece lands in its own
  // chunk. Returns the pieces, or nothing when there is no gap (the common case: one op).
  std::optional<std::vector<Nominal>> cutAtGaps(const std::vector<const ChunkRef*>& refs, Nominal part) const {
    const ChunkRef* data = nullptr;
    bool scratch = false;
    for (const ChunkRef* ref : refs) {
      if (ref->buffer == BufferType::kScratch) {
        scratch = true;
      } else if (data == nullptr) {
        data = ref;
      }
    }
    if (data == nullptr || !scratch) return std::nullopt;  // data to data: the gaps match (equal lengths)
    const uint64_t c = layout_.chunkBytes();
    std::vector<Nominal> pieces;
    bool gap = false;
    for (uint64_t chunk = part.begin / c; chunk * c < part.end; ++chunk) {
      const uint64_t start = layout_.position(data->buffer, data->index, chunk * c);
      const uint64_t live = layout_.position(data->buffer, data->index, (chunk + 1) * c) - start;
      const Nominal piece{std::max(part.begin, chunk * c), std::min(part.end, chunk * c + live)};
      if (piece.begin >= piece.end) continue;
      if (!pieces.empty() && pieces.back().end == piece.begin) {
        pieces.back().end = piece.end;  // the previous chunk was whole: still one contiguous piece
      } else {
        gap = gap || !pieces.empty();
        pieces.push_back(piece);
      }
    }
    if (!gap) return std::nullopt;
    for (const ChunkRef* ref : refs) {
      if (ref->count != data->count) {
        fail("its chunk ranges have different counts and cross a short chunk at the end of a slot for a " +
                 std::to_string(messageBytes_) + "-byte message",
             ErrorCategory::kInvalidArgument);
      }
    }
    return pieces;
  }

  // The common length of an op's data ranges (scratch ranges take whatever they are given).
  uint64_t commonBytes(const std::vector<Range>& ranges) const {
    std::optional<uint64_t> bytes;
    for (const Range& r : ranges) {
      if (!r.data) continue;
      if (bytes && *bytes != r.bytes) {
        fail("its data ranges cover " + std::to_string(*bytes) + " and " + std::to_string(r.bytes) + " bytes for a " +
                 std::to_string(messageBytes_) +
                 "-byte message; the ranges of one op must be equally long (nothing is truncated)",
             ErrorCategory::kInvalidArgument);
      }
      bytes = r.bytes;
    }
    if (bytes) return *bytes;
    return ranges.empty() ? 0 : ranges.front().bytes;
  }

  void push(OpCode code, uint8_t flags, const std::vector<Range>& srcs, const std::vector<Range>& dsts,
            uint64_t bytes) {
    if (code == OpCode::kTransfer && srcs.size() + dsts.size() > device::kMaxTransferOperands) {
      fail("more than " + std::to_string(device::kMaxTransferOperands) + " sources and destinations in one op");
    }
    if (srcs.size() > 255 || dsts.size() > 255) fail("more than 255 sources or destinations");
    device::Op op{};
    op.code = code;
    op.flags = flags;
    op.srcs = uint8_t(srcs.size());
    op.dsts = uint8_t(dsts.size());
    op.first = uint32_t(out_.operands.size());
    op.planOp = opIndex_;
    op.bytes = bytes;
    for (const Range& r : srcs) out_.operands.push_back(r.operand);
    for (const Range& r : dsts) out_.operands.push_back(r.operand);
    out_.ops.push_back(op);
    // Which port channels have a put the proxy may not have carried out yet (a counted plan's entry copy
    // into a peer's output over a port channel is such a put).
    const bool portEntryCopy = code == OpCode::kEntryCopy && dsts.size() == 1 &&
                               dsts[0].operand.channel != device::kLocalOperand &&
                               gpu_.channels[dsts[0].operand.channel].type == ChannelType::kPort;
    if (code == OpCode::kPortPut || code == OpCode::kFlush || portEntryCopy) {
      for (const Range& r : code == OpCode::kFlush ? srcs : dsts) {
        if (code != OpCode::kFlush && !(flags & device::kOpPortFlush)) {
          unflushed_.insert(r.operand.channel);
        } else {
          unflushed_.erase(r.operand.channel);
        }
      }
    }
  }

  // A call is over when its blocks end, and the caller may then reuse or free its buffers; a put
  // the proxy has not carried out yet would still read them (the source of a TCP send or an RDMA
  // write). So a block ends with a reads-only flush of every port channel it put on since that channel's
  // last flush.
  void flushAtEnd() {
    if (unflushed_.empty()) return;
    opType_ = OpType::kFlush;
    finishPortReads();
  }

  // A reads-only flush of every port channel put on since its last flush: the proxy no longer reads this
  // rank's memory for them.
  void finishPortReads() {
    if (unflushed_.empty()) return;
    std::vector<Range> channels;
    for (uint16_t channel : unflushed_) {
      Range r;
      r.operand.channel = channel;
      channels.push_back(r);
    }
    push(OpCode::kFlush, device::kOpSyncBefore | device::kOpSyncAfter | device::kOpReadsOnly, channels, {}, 0);
    unflushed_.clear();
  }

  static uint8_t syncFlags(DataSync sync) {
    switch (sync) {
      case DataSync::kNone:
        return 0;
      case DataSync::kBefore:
        return device::kOpSyncBefore;
      case DataSync::kAfter:
        return device::kOpSyncAfter;
      case DataSync::kBoth:
        return device::kOpSyncBefore | device::kOpSyncAfter;
    }
    return 0;
  }

  void emitSync(const Op& op, OpCode code) {
    std::vector<Range> operands;
    for (uint32_t id : op.channels) {
      Range r;
      r.operand.channel = channelIndex_.at(id);
      if (code == OpCode::kWait) claimWaiter(id);
      if (op.publish) {
        // This rank's receive entry from the peer, into the peer's mailbox of the paired channel.
        const Channel& via = channel(id);
        r.operand.entry = uint16_t(plan_.worldSize + via.peer);
        r.operand.offset = device::kMailboxBytes * mailboxOfPeer_[r.operand.channel];
      }
      operands.push_back(r);
    }
    for (uint32_t id : op.semaphores) {
      Range r;
      r.operand.channel = uint16_t(semaphoreIndex_.at(id));
      operands.push_back(r);
    }
    push(code, syncFlags(op.dataSync) | (op.relaxed ? device::kOpRelaxed : 0) | (op.publish ? device::kOpPublish : 0),
         operands, {}, 0);
  }

  // A wait raises its channel's expected count, which one thread keeps: two thread blocks waiting
  // on one channel would each count the other's signals.
  void claimWaiter(uint32_t channelId) {
    auto [it, fresh] = waiter_.emplace(channelId, tb_);
    if (!fresh && it->second != tb_) {
      fail("channel " + std::to_string(channelId) + " is also waited on by tb " + std::to_string(it->second) +
           "; the executor needs every channel's waits in one thread block");
    }
  }

  void emit(const Op& op, const Iteration& at) {
    opType_ = op.type;
    switch (op.type) {
      case OpType::kSignal:
        return emitSync(op, OpCode::kSignal);
      case OpType::kWait:
        return emitSync(op, OpCode::kWait);
      case OpType::kFlush:
        return emitSync(op, OpCode::kFlush);
      case OpType::kSemAcquire:
        return emitSync(op, OpCode::kSemAcquire);
      case OpType::kSemRelease:
        return emitSync(op, OpCode::kSemRelease);
      case OpType::kNop:
        return push(OpCode::kNop, device::kOpSyncBefore, {}, {}, 0);
      case OpType::kBarrier:
        return emitBarrier(op);
      case OpType::kMultimemReduce:
      case OpType::kMultimemBroadcast:
        fail("switch channels (NVLS multicast) are not run by this executor; they stay opt-in and untested here");
      case OpType::kPipeline:
        fail("pipelines do not nest");
      case OpType::kPut:
      case OpType::kPutPacket:
      case OpType::kReadPutPacket:
        if (!op.srcs.empty()) return emitPairs(op, at);
        return emitData(op, at);
      default:
        return emitData(op, at);
    }
  }

  // A send with one source per destination (srcs paired with dsts): one transfer per pair, in order.
  void emitPairs(const Op& op, const Iteration& at) {
    for (size_t i = 0; i < op.srcs.size(); ++i) {
      Op pair;
      pair.type = op.type;
      pair.src = op.srcs[i];
      pair.dsts = {op.dsts[i]};
      emitData(pair, at);
    }
  }

  void emitBarrier(const Op& op) {
    auto [it, fresh] = barrierIndex_.emplace(op.barrierId, uint32_t(barrierIndex_.size()));
    (void)fresh;
    push(OpCode::kBarrier, device::kOpSyncBefore | device::kOpSyncAfter, {}, {}, 0);
    out_.ops.back().barrier = it->second;
    out_.ops.back().participants = uint32_t(op.threadblocks.size());
  }

  // A part of a call's entry: this rank's send entry (its input slot p is the one to rank p), its receive
  // entry (output slot q, from rank q), or, for a peer's output, the entry the peer published into this
  // rank's mailbox of the channel, which is the peer's receive entry from this rank.
  Range entryRange(const ChunkRef& ref) const {
    const BufferShape& shape = layout_.shape(ref.buffer);
    const uint32_t slot = ref.index / shape.chunksPerSlot;
    const uint32_t first = ref.index % shape.chunksPerSlot;
    if (first + ref.count > shape.chunksPerSlot) {
      fail("its chunk range crosses from one entry into the next (" + std::to_string(ref.index) + " + " +
           std::to_string(ref.count) + " chunks of " + std::to_string(shape.chunksPerSlot) + " per entry)");
    }
    Range r;
    r.data = true;
    r.operand.buffer = uint8_t(ref.buffer);
    r.operand.channel = device::kLocalOperand;
    r.operand.sizing = device::OperandSizing::kTableEntry;
    r.operand.entry = uint16_t(ref.buffer == BufferType::kInput ? slot : plan_.worldSize + slot);
    if (ref.isRemote()) {
      const Channel& via = channel(ref.channel);
      if (slot != rank_) {
        fail("it writes rank " + std::to_string(via.peer) + "'s output entry from rank " + std::to_string(slot) +
             ", but a put reaches only the peer's entry from this rank (the one it publishes)");
      }
      r.operand.channel = channelIndex_.at(ref.channel);
      r.operand.sizing = device::OperandSizing::kMailbox;
      r.operand.entry = r.operand.channel;
    }
    r.operand.firstChunk = uint16_t(first);
    r.operand.chunkCount = uint16_t(ref.count);
    r.operand.entryChunks = uint16_t(shape.chunksPerSlot);
    return r;
  }

  // A packet region of a counted "ll" plan's scratch (counted_scratch.hpp): a scratch slot of this rank, or
  // of the peer behind a memory channel. `peerChannel`, this rank's channel to the peer, names the peer in
  // the receiver's reports.
  Range packetRegion(const ChunkRef& ref, uint32_t peerChannel) const {
    const CountedScratch& scratch = countedScratch_;
    if (ref.count != 1 || ref.index >= scratch.regions) {
      fail("a packet region is one scratch chunk of the " + std::to_string(scratch.regions) + " (got chunks " +
           std::to_string(ref.index) + " + " + std::to_string(ref.count) + ")");
    }
    Range r;
    r.operand.buffer = uint8_t(BufferType::kScratch);
    r.operand.channel = ref.isRemote() ? channelIndex_.at(ref.channel) : device::kLocalOperand;
    r.operand.packet = 1;
    r.operand.offset = scratch.regionOffset(ref.index);
    r.operand.oddOffset = scratch.oddOffset();
    r.operand.entry = uint16_t(peerChannel);
    return r;
  }

  // A whole entry of this rank's `buffer` (packets move entries whole: their count packet says how much).
  Range wholeEntry(const ChunkRef& ref, BufferType buffer, const char* what) const {
    if (ref.isRemote() || ref.buffer != buffer || ref.count != layout_.shape(buffer).chunksPerSlot ||
        ref.index % layout_.shape(buffer).chunksPerSlot != 0) {
      fail(std::string("a counted plan's ") + what + " takes a whole entry of this rank's " +
           std::string(bufferName(buffer)));
    }
    return entryRange(ref);
  }

  // put_packet and unpack_packet of a counted "ll" plan (entry_packets.hpp); the op's bytes are the capacity.
  void emitEntryPackets(const Op& op) {
    if (op.type == OpType::kPutPacket) {
      if (!op.src || op.dsts.empty()) fail("a counted plan's put_packet needs a source and destinations");
      const Range from = wholeEntry(*op.src, BufferType::kInput, "put_packet");
      for (const ChunkRef& dst : op.dsts) {  // the decoder has checked: a peer's scratch, over a memory channel
        push(OpCode::kEntryPutPackets, 0, {from}, {packetRegion(dst, channelIndex_.at(dst.channel))},
             plan_.maxMessageBytes);
      }
      return;
    }
    if (!op.src || !op.dst) fail("a counted plan's unpack_packet takes this rank's scratch slot into an output entry");
    const Range into = wholeEntry(*op.dst, BufferType::kOutput, "unpack_packet");
    const uint32_t sender = op.dst->index / layout_.shape(BufferType::kOutput).chunksPerSlot;
    const auto to = std::find_if(gpu_.channels.begin(), gpu_.channels.end(),
                                 [&](const Channel& c) { return c.peer == sender && c.type == ChannelType::kMemory; });
    if (to == gpu_.channels.end()) {
      fail("it unpacks rank " + std::to_string(sender) + "'s packets, but has no memory channel to that rank");
    }
    push(OpCode::kEntryUnpackPackets, 0, {packetRegion(*op.src, uint32_t(to - gpu_.channels.begin()))}, {into},
         plan_.maxMessageBytes);
  }

  // A data op of a counted plan: one kEntryCopy per source and destination pair (the decoder has refused
  // every other kind of op in such plans).
  void emitEntryCopies(const Op& op) {
    if (op.type == OpType::kPutPacket || op.type == OpType::kUnpackPacket) return emitEntryPackets(op);
    std::vector<std::pair<const ChunkRef*, const ChunkRef*>> pairs;
    if (op.src && op.dst) pairs.emplace_back(&*op.src, &*op.dst);
    if (op.src) {
      for (const ChunkRef& dst : op.dsts) pairs.emplace_back(&*op.src, &dst);
    } else {
      for (size_t i = 0; i < op.srcs.size() && i < op.dsts.size(); ++i) pairs.emplace_back(&op.srcs[i], &op.dsts[i]);
    }
    if (pairs.empty()) fail("a counted plan's data op needs a source and a destination");
    // Over a port channel the copy is the proxy's, and a fused signal (and flush) follows it in the FIFO.
    uint8_t portFlags = 0;
    if (op.type == OpType::kPutWithSignal || op.type == OpType::kPutWithSignalAndFlush) {
      portFlags |= device::kOpPortSignal;
    }
    if (op.type == OpType::kPutWithSignalAndFlush) portFlags |= device::kOpPortFlush;
    for (const auto& [src, dst] : pairs) {
      if (src->isRemote() || src->buffer != BufferType::kInput || dst->buffer != BufferType::kOutput) {
        fail("a counted plan copies from this rank's input entries into output entries only");
      }
      const bool port = dst->isRemote() && channel(dst->channel).type == ChannelType::kPort;
      if (portFlags != 0 && !port) fail("a put with a signal is for port channels");
      push(OpCode::kEntryCopy, port ? portFlags : 0, {entryRange(*src)}, {entryRange(*dst)}, 0);
    }
  }

  void emitData(const Op& op, const Iteration& at) {
    if (counted()) return emitEntryCopies(op);
    std::vector<const ChunkRef*> refs;
    for (const std::optional<ChunkRef>* ref : {&op.src, &op.dst, &op.packetDst}) {
      if (*ref) refs.push_back(&**ref);  // the op's own refs, not copies
    }
    for (const ChunkRef& ref : op.srcs) refs.push_back(&ref);
    for (const ChunkRef& ref : op.dsts) refs.push_back(&ref);
    if (refs.empty()) return emitDataPart(op, [&](const ChunkRef&) { return Nominal{}; });
    if (opSpec(op.type).packet && !layout_.chunksWhole() &&
        std::all_of(refs.begin(), refs.end(), [](const ChunkRef* r) { return r->buffer == BufferType::kScratch; })) {
      // Scratch chunks are moved whole, but packets were written only for the data a short chunk
      // holds: forwarding the rest would wait for packets nobody writes.
      fail("it forwards LL packets between scratch chunks, which needs every data chunk whole, but a " +
               std::to_string(messageBytes_) + "-byte message leaves a short one; use a multiple of " +
               std::to_string(layout_.wholeChunksUnit()) + " bytes",
           ErrorCategory::kInvalidArgument);
    }
    const auto cut = cutAtGaps(refs, slice(*refs.front(), at));
    if (!cut) return emitDataPart(op, [&](const ChunkRef& ref) { return slice(ref, at); });
    for (const Nominal& part : *cut) emitDataPart(op, [&](const ChunkRef&) { return part; });
  }

  // One data op over the part `partOf` gives for each of its chunk ranges.
  template <typename PartOf>
  void emitDataPart(const Op& op, const PartOf& partOf) {
    const bool packetOp = opSpec(op.type).packet;
    std::vector<Range> srcs, dsts, portDsts;
    // Sources: `src` first (for reduce_packet it is the local data the packets are added to).
    // Packet ops whose source is scratch read packets; reductions over `srcs` of a packet op read
    // packets too.
    if (op.src) srcs.push_back(range(*op.src, packetOp && op.src->buffer == BufferType::kScratch, partOf(*op.src)));
    for (const ChunkRef& ref : op.srcs) srcs.push_back(range(ref, packetOp, partOf(ref)));
    if (op.dst) dsts.push_back(range(*op.dst, packetOp && op.dst->buffer == BufferType::kScratch, partOf(*op.dst)));
    if (op.packetDst) dsts.push_back(range(*op.packetDst, true, partOf(*op.packetDst)));
    std::vector<Range> stagedPackets;  // packets for port destinations, assembled here first
    for (const ChunkRef& ref : op.dsts) {
      const bool port = channel(ref.channel).type == ChannelType::kPort;
      Range r = range(ref, packetOp, partOf(ref));
      if (port && packetOp) {
        Range staged = r;
        staged.operand.buffer = device::kStagingBuffer;
        stagedPackets.push_back(staged);
      }
      (port ? portDsts : dsts).push_back(r);
    }
    std::vector<Range> all = srcs;
    all.insert(all.end(), dsts.begin(), dsts.end());
    all.insert(all.end(), portDsts.begin(), portDsts.end());
    const uint64_t bytes = commonBytes(all);

    const bool reduces = opSpec(op.type).reduction;
    uint8_t portFlags = device::kOpSyncBefore;
    if (op.type == OpType::kPutWithSignal || op.type == OpType::kPutWithSignalAndFlush)
      portFlags |= device::kOpPortSignal;
    if (op.type == OpType::kPutWithSignalAndFlush) portFlags |= device::kOpPortFlush;

    if (portDsts.empty()) {
      return push(OpCode::kTransfer, reduces ? device::kOpReduces : 0, srcs, dsts, bytes);
    }
    if (!stagedPackets.empty()) {
      // Packets cross a port channel as bytes: pack them into the channel's staging area at the
      // offset they take in the peer's scratch, then one trigger per destination copies them over.
      std::vector<Range> packed = dsts;
      packed.insert(packed.end(), stagedPackets.begin(), stagedPackets.end());
      push(OpCode::kTransfer, reduces ? device::kOpReduces : 0, srcs, packed, bytes);
      const uint64_t packetBytes = (bytes + 7) / 8 * 16;
      for (size_t i = 0; i < portDsts.size(); ++i) {
        push(OpCode::kPortPut, device::kOpSyncBefore, {stagedPackets[i]}, {portDsts[i]}, packetBytes);
      }
      // The same staging bytes are packed again two calls later (LL halves alternate), and the proxy may still
      // be reading them then (an RDMA write reads them as it goes): wait until it no longer reads them. Not a
      // full flush: over TCP that waits for the peer's acknowledgement, a round trip, where a send has copied
      // them already; the receiver polls the packets' flags and needs nothing more.
      finishPortReads();
      return;
    }
    // The proxy copies from this rank's memory: a plain put sends its source, a reduction first
    // lands its result in `dst`, which the triggers then send.
    if (reduces) {
      if (!op.dst) fail("a reduction sent over a port channel needs a local dst to stage its result");
      push(OpCode::kTransfer, device::kOpReduces, srcs, dsts, bytes);
      return push(OpCode::kPortPut, portFlags, {dsts.front()}, portDsts, bytes);
    }
    if (!dsts.empty()) push(OpCode::kTransfer, 0, srcs, dsts, bytes);
    push(OpCode::kPortPut, portFlags, srcs, portDsts, bytes);
  }

  const Plan& plan_;
  const GpuProgram& gpu_;
  const uint32_t rank_;
  const uint64_t messageBytes_;
  const BufferLayout layout_;
  ResolvedProgram out_;
  std::unordered_map<uint32_t, uint16_t> channelIndex_;
  std::unordered_map<uint32_t, uint32_t> semaphoreIndex_;
  std::map<uint32_t, uint32_t> barrierIndex_;
  std::unordered_map<uint32_t, uint32_t> waiter_;  // channel id -> the tb that waits on it
  std::set<uint16_t> unflushed_;                   // port channels this block put on since their flush
  std::vector<uint32_t> mailboxOfPeer_;            // counted plans: by channel index, the peer's index of it
  CountedScratch countedScratch_;                  // counted plans: where mailboxes and packet regions lie
  uint32_t tb_ = 0;
  uint32_t opIndex_ = 0;
  OpType opType_ = OpType::kNop;
};

}  // namespace

ResolvedProgram resolve(const Plan& plan, uint32_t rank, uint64_t messageBytes) {
  if (plan.gpus.empty()) throw Error(ErrorCategory::kInvalidPlan, "plan '" + plan.name + "' has no programs");
  return Resolver(plan, rank, messageBytes).run();
}

}  // namespace loom
