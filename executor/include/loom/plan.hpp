#pragma once

// The typed model of a plan (format v1, schemas/plan.schema.json). The decoder is the only place that
// looks at JSON text; everything downstream works on these structs.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// kReduce comes last so that the values of the others (bits of LOOM_NCCL collective lists, cached
// selections) stay what they were.
// kAllToAllV: all-to-all with per-peer sizes given with each call (docs/plan-format.md, "call-sized slots");
// decoded and checked, not run by the executor in this version.
enum class Collective : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  kSendRecv,
  kReduce,
  kAllToAllV
};
enum class Protocol : uint8_t { kSimple, kLL };
enum class BufferType : uint8_t { kInput, kOutput, kScratch };
enum class ChannelType : uint8_t { kMemory, kPort, kSwitch };
enum class ReduceOp : uint8_t { kSum, kMin, kMax };
// Where a sync op synchronises the threads of its block: before it (so the op sees every thread's
// earlier writes), after it (so later ops see what it made visible), both, or neither.
enum class DataSync : uint8_t { kNone, kBefore, kAfter, kBoth };

enum class OpType : uint8_t {
  kCopy,
  kPut,
  kGet,
  kReduce,
  kReadReduce,
  kReduceSend,
  kReadReduceSend,
  kSignal,
  kWait,
  kFlush,
  kBarrier,
  kSemAcquire,
  kSemRelease,
  kNop,
  kPutPacket,
  kReadPutPacket,
  kCopyPacket,
  kUnpackPacket,
  kReducePacket,
  kReduceSendPacket,
  kReduceCopyPacket,
  kReduceCopySendPacket,
  kMultimemReduce,
  kMultimemBroadcast,
  kPipeline,
  kPutWithSignal,
  kPutWithSignalAndFlush,
};
inline constexpr size_t kOpTypeCount = static_cast<size_t>(OpType::kPutWithSignalAndFlush) + 1;

// Names as they appear in plan JSON ("allreduce", "ll", "scratch", "put_packet", ...).
std::string_view collectiveName(Collective value);
std::string_view protocolName(Protocol value);
std::string_view bufferName(BufferType value);
std::string_view channelTypeName(ChannelType value);
std::string_view reduceOpName(ReduceOp value);
std::string_view dataSyncName(DataSync value);
std::string_view opTypeName(OpType value);

inline constexpr uint32_t kLocalChunk = UINT32_MAX;  // ChunkRef::channel of a chunk on this rank

// Chunks [index, index + count) of a buffer: this rank's own, or one reached through a channel.
struct ChunkRef {
  BufferType buffer = BufferType::kInput;
  uint32_t index = 0;
  uint32_t count = 1;
  uint32_t channel = kLocalChunk;
  bool isRemote() const { return channel != kLocalChunk; }
};

struct SourceLocation {
  std::string file;
  uint32_t line = 0;
};

struct Op {
  OpType type = OpType::kNop;
  std::optional<ChunkRef> src;
  std::optional<ChunkRef> dst;
  std::optional<ChunkRef> packetDst;
  std::vector<ChunkRef> srcs;
  std::vector<ChunkRef> dsts;
  std::vector<uint32_t> channels;      // signal, wait, flush
  std::vector<uint32_t> threadblocks;  // barrier participants
  std::vector<uint32_t> semaphores;    // sem_acquire, sem_release
  std::optional<ReduceOp> reduceOp;
  bool relaxed = false;
  bool publish = false;                 // signal in an alltoallv plan: the receive entry into the peer's mailbox first
  DataSync dataSync = DataSync::kBoth;  // signal, wait, flush, sem_acquire, sem_release
  uint32_t barrierId = 0;
  uint32_t iterations = 1;  // pipeline of a fixed number of equal slices
  uint32_t unitBytes = 0;   // pipeline sized in bytes (MSCCL++'s unit): slices of this many bytes; 0 if not
  std::vector<Op> body;     // pipeline
  std::optional<SourceLocation> location;
};

struct Channel {
  uint32_t id = 0;
  ChannelType type = ChannelType::kMemory;
  uint32_t peer = 0;                        // memory and port channels
  std::vector<uint32_t> ranks;              // switch channels: the multicast group
  BufferType buffer = BufferType::kOutput;  // switch channels: the buffer bound to the group
};

struct Semaphore {
  uint32_t id = 0;
  uint32_t initialValue = 0;
};

struct ThreadBlock {
  uint32_t id = 0;
  std::vector<Op> ops;
};

struct GpuProgram {
  uint32_t rank = 0;
  uint32_t inputChunks = 1;
  uint32_t outputChunks = 1;
  uint32_t scratchChunks = 0;
  std::vector<Channel> channels;
  std::vector<Semaphore> semaphores;
  std::vector<ThreadBlock> threadblocks;

  uint32_t chunks(BufferType buffer) const;
};

struct PlanMetadata {
  std::string compilerVersion;
  std::string sourceHash;
  std::string description;
};

struct Plan {
  static constexpr uint32_t kFormatVersion = 1;

  std::string name;
  Collective collective = Collective::kAllReduce;
  Protocol protocol = Protocol::kSimple;
  bool inplace = false;
  uint32_t worldSize = 1;
  uint32_t ranksPerNode = 1;
  uint32_t threadsPerBlock = 1024;
  uint64_t minMessageBytes = 0;
  uint64_t maxMessageBytes = 0;
  uint32_t alignmentBytes = 16;
  bool reuseScratch = false;
  std::optional<uint32_t> root;
  PlanMetadata metadata;
  std::vector<GpuProgram> gpus;
  // A hash of the plan's text, set by parse/load: what caches key on and what ranks compare at setup
  // (a changed plan under the same name never matches).
  uint64_t contentHash = 0;
  // The JSON text it was decoded from (the verifier proves that text: loom.verify.certificate).
  std::string text;

  // Decode and check a plan. Throws PlanError naming the JSON path of the first problem.
  // `origin` names the text in messages (a file path, or "<memory>").
  static Plan parse(std::string_view json, const std::string& origin = "<memory>");
  // A file of plan JSON, or of gzip-compressed plan JSON (how the bundled plans are installed,
  // NAME.json.gz); errors name the file. LOOM_MAX_PLAN_BYTES bounds the JSON, decompressed.
  static Plan load(const std::string& path);

  // The program of one rank (gpus are not required to be listed in rank order).
  const GpuProgram& gpu(uint32_t rank) const;
};

// The operator of the plan's reductions (the first one found, pipeline bodies included); none for a
// plan that only moves data. The executor refuses a plan that mixes operators on one rank.
std::optional<ReduceOp> planReduceOp(const Plan& plan);

// Plans larger than this are refused before parsing; LOOM_MAX_PLAN_BYTES overrides it.
inline constexpr size_t kDefaultMaxPlanBytes = 32u << 20;
size_t maxPlanBytes();

// Counts used by `loom info` and tests: ops by type (pipeline bodies included), thread blocks.
struct PlanSummary {
  std::array<uint64_t, kOpTypeCount> opsByType{};
  uint64_t threadblocks = 0;
  uint64_t maxThreadblocksPerRank = 0;
  uint32_t maxScratchChunks = 0;
  uint64_t channels = 0;
};
PlanSummary summarize(const Plan& plan);

}  // namespace loom
