// JSON text -> typed Plan. This file checks what the schema checks (types, required and unknown
// fields, enums, ranges); plan_validation.cc checks how the parts refer to each other.

#include "plan_decoder.hpp"

#include <simdjson.h>

#include <array>
#include <charconv>
#include <cmath>
#include <string>
#include <system_error>
#include <utility>

#include "bad_number_locator.hpp"
#include "json_path.hpp"
#include "loom/error.hpp"
#include "op_spec.hpp"

namespace loom {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

constexpr uint64_t kMaxUint32 = UINT32_MAX;
constexpr uint64_t kMaxJsonSafeInteger = (uint64_t{1} << 53) - 1;  // what every JSON reader keeps exact

std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text.substr(0, 64)) out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
  if (text.size() > 64) out += "...";
  return out + "\"";
}

// What a value is, for "expected X, got Y" messages.
std::string describe(element value) {
  switch (value.type()) {
    case element_type::ARRAY:
      return "an array";
    case element_type::OBJECT:
      return "an object";
    case element_type::STRING:
      return "the string " + quoted(std::string_view(value));
    case element_type::BOOL:
      return bool(value) ? "true" : "false";
    case element_type::NULL_VALUE:
      return "null";
    case element_type::INT64:
      return std::to_string(int64_t(value));
    case element_type::UINT64:
      return std::to_string(uint64_t(value));
    case element_type::DOUBLE: {
      // Shortest text that reads back the same: std::to_string would print 1e-7 as "0.000000".
      char text[32];
      auto [end, error] = std::to_chars(text, text + sizeof(text), double(value));
      return "the number " + (error == std::errc() ? std::string(text, end) : std::string("?"));
    }
  }
  return "an unknown value";
}

template <typename Enum>
using Choices = std::initializer_list<std::pair<std::string_view, Enum>>;

template <size_t N>
using FieldNames = std::array<std::string_view, N>;

template <size_t N>
std::string joinNames(const FieldNames<N>& names) {
  std::string out;
  for (std::string_view name : names) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

// The members of one object, looked up by position in a fixed list of field names.
template <size_t N>
struct Fields {
  std::array<std::optional<element>, N> values;
  const FieldNames<N>* names = nullptr;
  const std::optional<element>& operator[](size_t i) const { return values[i]; }
};

enum OpField : size_t {
  kOpName,
  kOpLoc,
  kOpSrc,
  kOpDst,
  kOpPacketDst,
  kOpSrcs,
  kOpDsts,
  kOpChannels,
  kOpRelaxed,
  kOpPublish,
  kOpDataSync,
  kOpReduceOp,
  kOpBarrierId,
  kOpThreadblocks,
  kOpSemaphores,
  kOpIterations,
  kOpUnitBytes,
  kOpBody,
  kOpFieldCount,
};
constexpr FieldNames<kOpFieldCount> kOpFields{"op",         "loc",        "src",        "dst",          "packet_dst",
                                              "srcs",       "dsts",       "channels",   "relaxed",      "publish",
                                              "data_sync",  "reduce_op",  "barrier_id", "threadblocks", "semaphores",
                                              "iterations", "unit_bytes", "body"};

bool opTakes(const OpSpec& spec, size_t field) {
  switch (field) {
    case kOpName:
    case kOpLoc:
      return true;
    case kOpSrc:
      return spec.src.kind != RefKind::kNone;
    case kOpDst:
      return spec.dst.kind != RefKind::kNone;
    case kOpPacketDst:
      return spec.packetDst.kind != RefKind::kNone;
    case kOpSrcs:
      return spec.srcs.kind != RefKind::kNone;
    case kOpDsts:
      return spec.dsts.kind != RefKind::kNone;
    case kOpChannels:
      return spec.channelList;
    case kOpRelaxed:
      return spec.relaxable;
    case kOpPublish:
      return spec.type == OpType::kSignal;
    case kOpDataSync:
      return spec.channelList || spec.type == OpType::kSemAcquire || spec.type == OpType::kSemRelease;
    case kOpReduceOp:
      return spec.reduction;
    case kOpBarrierId:
    case kOpThreadblocks:
      return spec.type == OpType::kBarrier;
    case kOpSemaphores:
      return spec.type == OpType::kSemAcquire || spec.type == OpType::kSemRelease;
    case kOpIterations:
    case kOpUnitBytes:
    case kOpBody:
      return spec.type == OpType::kPipeline;
  }
  return false;
}

std::string opFieldList(const OpSpec& spec) {
  std::string out;
  for (size_t i = 0; i < kOpFieldCount; ++i) {
    if (opTakes(spec, i)) out += (out.empty() ? "" : ", ") + std::string(kOpFields[i]);
  }
  return out;
}

const char* refKindText(RefKind kind) {
  switch (kind) {
    case RefKind::kLocal:
      return "a chunk of this rank ({buffer, index, count})";
    case RefKind::kRemote:
      return "a chunk reached through a channel ({channel, buffer, index, count})";
    case RefKind::kAny:
      return "a chunk ({buffer, index, count}, with channel when remote)";
    case RefKind::kLocalScratch:
      return "a chunk of this rank's scratch";
    case RefKind::kRemoteScratch:
      return "a chunk of a peer's scratch reached through a channel";
    case RefKind::kNone:
      break;
  }
  return "nothing";
}

class Decoder {
 public:
  explicit Decoder(const std::string& origin) : origin_(origin) {}

  Plan plan(element root) {
    const JsonPath path;
    static constexpr FieldNames<15> kNames{"format_version",
                                           "name",
                                           "collective",
                                           "protocol",
                                           "inplace",
                                           "world_size",
                                           "ranks_per_node",
                                           "threads_per_block",
                                           "min_message_bytes",
                                           "max_message_bytes",
                                           "alignment_bytes",
                                           "reuse_scratch",
                                           "root",
                                           "metadata",
                                           "gpus"};
    auto f = fields(asObject(root, path, "a plan object"), path, kNames);
    Plan plan;
    {
      const JsonPath p = path.field("format_version");
      uint64_t version = integer(need(f, 0, path, "the format version, 1"), p, 0, kMaxJsonSafeInteger);
      if (version != Plan::kFormatVersion) {
        fail(p, std::to_string(version) + " is not a supported format version (this reader knows version 1)");
      }
    }
    {
      const JsonPath p = path.field("name");
      plan.name = std::string(string(need(f, 1, path, "the plan's name"), p, 256));
      if (plan.name.empty()) fail(p, "expected a non-empty name, got \"\"");
    }
    const element collective = need(f, 2, path, "a collective");
    if (collective.type() == element_type::STRING && std::string_view(collective) == "test") {
      fail(path.field("collective"),
           "a test plan (MSCCL++'s TestCollective) has no collective to run: it is for the verifier only (loom "
           "verify); the executor runs allreduce, allgather, reducescatter, alltoall, broadcast, reduce and sendrecv "
           "plans");
    }
    plan.collective = choice<Collective>(collective, path.field("collective"),
                                         {{"allreduce", Collective::kAllReduce},
                                          {"allgather", Collective::kAllGather},
                                          {"reducescatter", Collective::kReduceScatter},
                                          {"alltoall", Collective::kAllToAll},
                                          {"broadcast", Collective::kBroadcast},
                                          {"reduce", Collective::kReduce},
                                          {"sendrecv", Collective::kSendRecv},
                                          {"alltoallv", Collective::kAllToAllV}});
    plan.protocol = choice<Protocol>(need(f, 3, path, "a protocol"), path.field("protocol"),
                                     {{"simple", Protocol::kSimple}, {"ll", Protocol::kLL}});
    plan.inplace = boolean(need(f, 4, path, "true or false"), path.field("inplace"));
    plan.worldSize = uint32(need(f, 5, path, "the number of ranks"), path.field("world_size"), 1, 65536);
    plan.ranksPerNode = uint32(need(f, 6, path, "the ranks per node"), path.field("ranks_per_node"), 1, 65536);
    {
      const JsonPath p = path.field("threads_per_block");
      plan.threadsPerBlock = uint32(need(f, 7, path, "threads per thread block"), p, 32, 1024);
      if (plan.threadsPerBlock % 32 != 0) {
        fail(p, "expected a multiple of 32 (whole warps), got " + std::to_string(plan.threadsPerBlock));
      }
    }
    plan.minMessageBytes =
        integer(need(f, 8, path, "a size in bytes"), path.field("min_message_bytes"), 0, kMaxJsonSafeInteger);
    plan.maxMessageBytes =
        integer(need(f, 9, path, "a size in bytes"), path.field("max_message_bytes"), 0, kMaxJsonSafeInteger);
    {
      const JsonPath p = path.field("alignment_bytes");
      plan.alignmentBytes = uint32(need(f, 10, path, "a power of two from 1 to 4096"), p, 1, 4096);
      if ((plan.alignmentBytes & (plan.alignmentBytes - 1)) != 0) {
        fail(p, "expected a power of two from 1 to 4096, got " + std::to_string(plan.alignmentBytes));
      }
    }
    if (f[11]) plan.reuseScratch = boolean(*f[11], path.field("reuse_scratch"));
    if (f[12]) plan.root = uint32(*f[12], path.field("root"), 0, kMaxUint32);
    if (f[13]) plan.metadata = metadata(*f[13], path.field("metadata"));
    {
      const JsonPath p = path.field("gpus");
      simdjson::dom::array gpus = nonEmptyArray(need(f, 14, path, "one program per rank"), p, "one program per rank");
      plan.gpus.reserve(gpus.size());
      size_t i = 0;
      for (element gpuValue : gpus) {
        const JsonPath gpuPath = p.at(i++);
        plan.gpus.push_back(gpu(gpuValue, gpuPath));
      }
    }
    return plan;
  }

 private:
  [[noreturn]] void fail(const JsonPath& path, const std::string& detail) const {
    throw PlanError(origin_, path.str(), detail);
  }

  simdjson::dom::object asObject(element value, const JsonPath& path, std::string_view what) {
    if (value.type() != element_type::OBJECT) fail(path, "expected " + std::string(what) + ", got " + describe(value));
    return value.get_object().value_unsafe();
  }

  simdjson::dom::array asArray(element value, const JsonPath& path, std::string_view what) {
    if (value.type() != element_type::ARRAY) fail(path, "expected " + std::string(what) + ", got " + describe(value));
    return value.get_array().value_unsafe();
  }

  simdjson::dom::array nonEmptyArray(element value, const JsonPath& path, std::string_view what) {
    if (value.type() != element_type::ARRAY) {
      fail(path, "expected an array of " + std::string(what) + ", got " + describe(value));
    }
    simdjson::dom::array items = value.get_array().value_unsafe();
    if (items.size() == 0) fail(path, "expected a non-empty array of " + std::string(what) + ", got []");
    return items;
  }

  template <size_t N>
  Fields<N> fields(simdjson::dom::object members, const JsonPath& path, const FieldNames<N>& names) {
    Fields<N> out;
    out.names = &names;
    for (auto [key, value] : members) {
      size_t i = 0;
      // Compare first bytes before whole names: this runs for every key of a plan.
      while (i < N && (names[i].size() != key.size() || names[i][0] != key[0] || names[i] != key)) ++i;
      if (i == N) fail(path.field(key), "unknown field (allowed here: " + joinNames(names) + ")");
      if (out.values[i]) fail(path.field(key), "duplicate field");
      out.values[i] = value;
    }
    return out;
  }

  template <size_t N>
  element need(const Fields<N>& f, size_t i, const JsonPath& path, std::string_view what) {
    if (!f[i]) fail(path.field((*f.names)[i]), "missing required field (expected " + std::string(what) + ")");
    return *f[i];
  }

  uint64_t integer(element value, const JsonPath& path, uint64_t min, uint64_t max) {
    auto rangeText = [&] { return "expected an integer from " + std::to_string(min) + " to " + std::to_string(max); };
    switch (value.type()) {
      case element_type::INT64: {
        int64_t v = int64_t(value);
        if (v < 0 || uint64_t(v) < min || uint64_t(v) > max) fail(path, rangeText() + ", got " + std::to_string(v));
        return uint64_t(v);
      }
      case element_type::UINT64: {
        uint64_t v = uint64_t(value);
        if (v < min || v > max) fail(path, rangeText() + ", got " + std::to_string(v));
        return v;
      }
      case element_type::DOUBLE: {
        // JSON Schema counts 3.0 as an integer; accept exactly-integral doubles the same way.
        double v = double(value);
        if (std::isfinite(v) && std::floor(v) == v && v >= double(min) && v <= double(max)) return uint64_t(v);
        fail(path, rangeText() + ", got " + describe(value));
      }
      default:
        fail(path, rangeText() + ", got " + describe(value));
    }
  }

  uint32_t uint32(element value, const JsonPath& path, uint32_t min, uint32_t max) {
    return static_cast<uint32_t>(integer(value, path, min, max));
  }

  bool boolean(element value, const JsonPath& path) {
    if (value.type() != element_type::BOOL) fail(path, "expected true or false, got " + describe(value));
    return bool(value);
  }

  std::string_view string(element value, const JsonPath& path, size_t maxLength) {
    if (value.type() != element_type::STRING) fail(path, "expected a string, got " + describe(value));
    std::string_view text(value);
    if (text.size() > maxLength) {
      fail(path, "expected at most " + std::to_string(maxLength) + " bytes, got " + std::to_string(text.size()));
    }
    return text;
  }

  template <typename Enum>
  Enum choice(element value, const JsonPath& path, Choices<Enum> options) {
    if (value.type() == element_type::STRING) {
      std::string_view text(value);
      for (const auto& [name, v] : options) {
        if (name == text) return v;
      }
    }
    std::string allowed;
    for (const auto& [name, v] : options) allowed += (allowed.empty() ? "" : ", ") + quoted(name);
    fail(path, "expected one of " + allowed + ", got " + describe(value));
  }

  BufferType buffer(element value, const JsonPath& path) {
    return choice<BufferType>(
        value, path,
        {{"input", BufferType::kInput}, {"output", BufferType::kOutput}, {"scratch", BufferType::kScratch}});
  }

  std::vector<uint32_t> idList(element value, const JsonPath& path, std::string_view what) {
    simdjson::dom::array items = nonEmptyArray(value, path, what);
    std::vector<uint32_t> ids;
    ids.reserve(items.size());
    size_t i = 0;
    for (element item : items) {
      const JsonPath itemPath = path.at(i++);
      uint32_t id = uint32(item, itemPath, 0, UINT32_MAX);
      for (uint32_t seen : ids) {
        if (seen == id) fail(itemPath, std::to_string(id) + " is listed twice");
      }
      ids.push_back(id);
    }
    return ids;
  }

  PlanMetadata metadata(element value, const JsonPath& path) {
    PlanMetadata out;
    // Free-form provenance: unknown keys are allowed here, the well-known ones are typed.
    for (auto [key, item] : asObject(value, path, "an object")) {
      if (key == "compiler_version") out.compilerVersion = string(item, path.field(key), 4096);
      if (key == "source_hash") out.sourceHash = string(item, path.field(key), 4096);
      if (key == "description") out.description = string(item, path.field(key), 1 << 20);
      if (key == "parameters") asObject(item, path.field(key), "an object");
    }
    return out;
  }

  GpuProgram gpu(element value, const JsonPath& path) {
    static constexpr FieldNames<7> kNames{"id",       "input_chunks", "output_chunks", "scratch_chunks",
                                          "channels", "semaphores",   "threadblocks"};
    auto f = fields(asObject(value, path, "a gpu object"), path, kNames);
    GpuProgram gpu;
    gpu.rank = uint32(need(f, 0, path, "the rank"), path.field("id"), 0, UINT32_MAX);
    gpu.inputChunks = uint32(need(f, 1, path, "a chunk count"), path.field("input_chunks"), 1, UINT32_MAX);
    gpu.outputChunks = uint32(need(f, 2, path, "a chunk count"), path.field("output_chunks"), 1, UINT32_MAX);
    gpu.scratchChunks = uint32(need(f, 3, path, "a chunk count"), path.field("scratch_chunks"), 0, UINT32_MAX);
    {
      const JsonPath p = path.field("channels");
      size_t i = 0;
      for (element item : asArray(need(f, 4, path, "an array of channels"), p, "an array of channels")) {
        const JsonPath itemPath = p.at(i++);
        gpu.channels.push_back(channel(item, itemPath));
      }
    }
    if (f[5]) {
      const JsonPath p = path.field("semaphores");
      size_t i = 0;
      for (element item : asArray(*f[5], p, "an array of semaphores")) {
        const JsonPath itemPath = p.at(i++);
        gpu.semaphores.push_back(semaphore(item, itemPath));
      }
    }
    {
      const JsonPath p = path.field("threadblocks");
      size_t i = 0;
      simdjson::dom::array tbs = asArray(need(f, 6, path, "an array of thread blocks"), p, "an array of thread blocks");
      gpu.threadblocks.reserve(tbs.size());
      for (element item : tbs) {
        const JsonPath itemPath = p.at(i++);
        gpu.threadblocks.push_back(threadblock(item, itemPath));
      }
    }
    return gpu;
  }

  Channel channel(element value, const JsonPath& path) {
    static constexpr FieldNames<5> kNames{"id", "type", "peer", "ranks", "buffer"};
    auto f = fields(asObject(value, path, "a channel object"), path, kNames);
    Channel channel;
    channel.id = uint32(need(f, 0, path, "the channel id"), path.field("id"), 0, UINT32_MAX);
    channel.type = choice<ChannelType>(
        need(f, 1, path, "a channel type"), path.field("type"),
        {{"memory", ChannelType::kMemory}, {"port", ChannelType::kPort}, {"switch", ChannelType::kSwitch}});
    if (channel.type == ChannelType::kSwitch) {
      if (f[2]) fail(path.field("peer"), "a switch channel has no peer; it names its group in \"ranks\"");
      channel.ranks = idList(need(f, 3, path, "the ranks of the multicast group"), path.field("ranks"), "ranks");
      if (channel.ranks.size() < 2) fail(path.field("ranks"), "expected at least 2 ranks in a multicast group");
      channel.buffer = buffer(need(f, 4, path, "the buffer bound to the group"), path.field("buffer"));
    } else {
      for (size_t i : {3, 4}) {
        if (f[i]) fail(path.field(kNames[i]), "only switch channels have \"ranks\" and \"buffer\"");
      }
      channel.peer = uint32(need(f, 2, path, "the peer rank"), path.field("peer"), 0, UINT32_MAX);
    }
    return channel;
  }

  Semaphore semaphore(element value, const JsonPath& path) {
    static constexpr FieldNames<2> kNames{"id", "initial_value"};
    auto f = fields(asObject(value, path, "a semaphore object"), path, kNames);
    Semaphore semaphore;
    semaphore.id = uint32(need(f, 0, path, "the semaphore id"), path.field("id"), 0, UINT32_MAX);
    if (f[1]) semaphore.initialValue = uint32(*f[1], path.field("initial_value"), 0, UINT32_MAX);
    return semaphore;
  }

  ThreadBlock threadblock(element value, const JsonPath& path) {
    static constexpr FieldNames<2> kNames{"id", "ops"};
    auto f = fields(asObject(value, path, "a thread block object"), path, kNames);
    ThreadBlock tb;
    tb.id = uint32(need(f, 0, path, "the thread block id"), path.field("id"), 0, UINT32_MAX);
    const JsonPath p = path.field("ops");
    simdjson::dom::array ops = asArray(need(f, 1, path, "an array of ops"), p, "an array of ops");
    tb.ops.reserve(ops.size());
    size_t i = 0;
    for (element item : ops) {
      const JsonPath itemPath = p.at(i++);
      decodeOp(item, itemPath, false, tb.ops.emplace_back());
    }
    return tb;
  }

  // Decodes into `op` in place: ops are most of a plan, and moving them around is measurable.
  void decodeOp(element value, const JsonPath& path, bool inPipeline, Op& op) {
    auto f = fields(asObject(value, path, "an op object"), path, kOpFields);
    const JsonPath namePath = path.field("op");
    std::string_view name = string(need(f, kOpName, path, "an op name"), namePath, 64);
    std::optional<OpType> type = opTypeFromName(name);
    if (!type) {
      std::string known;
      for (size_t i = 0; i < kOpTypeCount; ++i) {
        known += (known.empty() ? "" : ", ") + std::string(opTypeName(static_cast<OpType>(i)));
      }
      fail(namePath, "unknown op " + quoted(name) + " (known ops: " + known + ")");
    }
    const OpSpec& spec = opSpec(*type);
    if (inPipeline && spec.type == OpType::kPipeline) fail(namePath, "a pipeline cannot be nested inside a pipeline");
    for (size_t i = 0; i < kOpFieldCount; ++i) {
      if (f[i] && !opTakes(spec, i)) {
        fail(path.field(kOpFields[i]),
             "not a field of a " + quoted(spec.name) + " op (its fields: " + opFieldList(spec) + ")");
      }
    }

    op.type = spec.type;
    if (f[kOpLoc]) op.location = location(*f[kOpLoc], path.field("loc"));
    op.src = chunkField(f, kOpSrc, spec.src, path);
    op.dst = chunkField(f, kOpDst, spec.dst, path);
    op.packetDst = chunkField(f, kOpPacketDst, spec.packetDst, path);
    op.srcs = chunkListField(f, kOpSrcs, spec.srcs, path);
    op.dsts = chunkListField(f, kOpDsts, spec.dsts, path);
    if (spec.reduction) {
      op.reduceOp = choice<ReduceOp>(need(f, kOpReduceOp, path, "a reduction: \"sum\", \"min\" or \"max\""),
                                     path.field("reduce_op"),
                                     {{"sum", ReduceOp::kSum}, {"min", ReduceOp::kMin}, {"max", ReduceOp::kMax}});
    }
    if (spec.channelList) {
      op.channels =
          idList(need(f, kOpChannels, path, "the ids of the channels"), path.field("channels"), "channel ids");
    }
    if (f[kOpRelaxed]) op.relaxed = boolean(*f[kOpRelaxed], path.field("relaxed"));
    if (f[kOpPublish]) op.publish = boolean(*f[kOpPublish], path.field("publish"));
    if (f[kOpDataSync]) {
      op.dataSync = choice<DataSync>(*f[kOpDataSync], path.field("data_sync"),
                                     {{"none", DataSync::kNone},
                                      {"before", DataSync::kBefore},
                                      {"after", DataSync::kAfter},
                                      {"both", DataSync::kBoth}});
    }
    switch (spec.type) {
      case OpType::kPut:
      case OpType::kPutPacket:
      case OpType::kReadPutPacket:
        if (op.src.has_value() == !op.srcs.empty()) {
          fail(path.field(op.src ? "srcs" : "src"),
               "expected either src (one source for every destination) or srcs (one per destination), " +
                   std::string(op.src ? "got both" : "got neither"));
        }
        if (!op.srcs.empty() && op.srcs.size() != op.dsts.size()) {
          fail(path.field("srcs"), "expected one source per destination (" + std::to_string(op.dsts.size()) +
                                       "), got " + std::to_string(op.srcs.size()));
        }
        break;
      case OpType::kMultimemReduce:
        if (!op.dst && op.dsts.empty()) {
          fail(path.field("dst"), "expected a destination: dst (this rank's chunk), dsts (multicast chunks) or both");
        }
        break;
      case OpType::kBarrier:
        op.barrierId = uint32(need(f, kOpBarrierId, path, "the barrier id"), path.field("barrier_id"), 0, UINT32_MAX);
        op.threadblocks = idList(need(f, kOpThreadblocks, path, "the ids of the thread blocks that meet"),
                                 path.field("threadblocks"), "thread block ids");
        break;
      case OpType::kSemAcquire:
      case OpType::kSemRelease:
        op.semaphores = idList(need(f, kOpSemaphores, path, "the ids of the semaphores"), path.field("semaphores"),
                               "semaphore ids");
        break;
      case OpType::kPipeline: {
        // Either a fixed number of equal slices or slices of a size in bytes (their number follows the
        // message size), never both.
        if (f[kOpUnitBytes] && f[kOpIterations]) {
          fail(path.field("unit_bytes"), "expected either iterations or unit_bytes in a pipeline, got both");
        }
        if (f[kOpUnitBytes]) {
          op.unitBytes = uint32(*f[kOpUnitBytes], path.field("unit_bytes"), 16, UINT32_MAX);
          if (op.unitBytes % 16 != 0) {
            fail(path.field("unit_bytes"), "expected a multiple of 16 bytes, got " + std::to_string(op.unitBytes));
          }
        } else {
          op.iterations = uint32(need(f, kOpIterations, path, "the number of iterations (or unit_bytes)"),
                                 path.field("iterations"), 1, 65536);
        }
        const JsonPath bodyPath = path.field("body");
        size_t i = 0;
        for (element item : nonEmptyArray(need(f, kOpBody, path, "the ops to repeat"), bodyPath, "ops")) {
          const JsonPath itemPath = bodyPath.at(i++);
          decodeOp(item, itemPath, true, op.body.emplace_back());
        }
        break;
      }
      default:
        break;
    }
  }

  SourceLocation location(element value, const JsonPath& path) {
    static constexpr FieldNames<2> kNames{"file", "line"};
    auto f = fields(asObject(value, path, "a source location {file, line}"), path, kNames);
    SourceLocation loc;
    loc.file = std::string(string(need(f, 0, path, "a file name"), path.field("file"), 4096));
    loc.line = uint32(need(f, 1, path, "a line number"), path.field("line"), 1, UINT32_MAX);
    return loc;
  }

  std::optional<ChunkRef> chunkField(const Fields<kOpFieldCount>& f, size_t field, RefField spec,
                                     const JsonPath& path) {
    if (spec.kind == RefKind::kNone || (!spec.required && !f[field])) return std::nullopt;
    const JsonPath p = path.field(kOpFields[field]);
    return chunk(need(f, field, path, refKindText(spec.kind)), p, spec.kind);
  }

  std::vector<ChunkRef> chunkListField(const Fields<kOpFieldCount>& f, size_t field, RefField spec,
                                       const JsonPath& path) {
    std::vector<ChunkRef> refs;
    if (spec.kind == RefKind::kNone || (!spec.required && !f[field])) return refs;
    const JsonPath p = path.field(kOpFields[field]);
    element value = need(f, field, path, "a non-empty array of chunks");
    size_t i = 0;
    for (element item : nonEmptyArray(value, p, refKindText(spec.kind))) {
      const JsonPath itemPath = p.at(i++);
      refs.push_back(chunk(item, itemPath, spec.kind));
    }
    return refs;
  }

  ChunkRef chunk(element value, const JsonPath& path, RefKind kind) {
    static constexpr FieldNames<4> kNames{"channel", "buffer", "index", "count"};
    auto f = fields(asObject(value, path, refKindText(kind)), path, kNames);
    const bool remote = kind == RefKind::kRemote || kind == RefKind::kRemoteScratch;
    const bool local = kind == RefKind::kLocal || kind == RefKind::kLocalScratch;
    ChunkRef ref;
    if (f[0] && local) fail(path.field("channel"), "this chunk must be on this rank; a local chunk names no channel");
    if (f[0] || remote) {
      ref.channel = uint32(need(f, 0, path, "the id of the channel that reaches the chunk"), path.field("channel"), 0,
                           UINT32_MAX - 1);
    }
    const JsonPath bufferPath = path.field("buffer");
    ref.buffer = buffer(need(f, 1, path, "\"input\", \"output\" or \"scratch\""), bufferPath);
    if ((kind == RefKind::kLocalScratch || kind == RefKind::kRemoteScratch) && ref.buffer != BufferType::kScratch) {
      fail(bufferPath, "packets live in scratch: expected \"scratch\", got " + quoted(bufferName(ref.buffer)));
    }
    ref.index = uint32(need(f, 2, path, "a chunk index"), path.field("index"), 0, UINT32_MAX);
    if (f[3]) ref.count = uint32(*f[3], path.field("count"), 1, UINT32_MAX);
    return ref;
  }

  const std::string& origin_;
};

}  // namespace

Plan decodePlan(simdjson::padded_string_view json, const std::string& origin) {
  // One parser per thread, reused: for multi-megabyte plans, first-touching fresh parser buffers
  // costs more than the parse itself. Buffers grown past kKeptParserBytes are released afterwards.
  constexpr size_t kKeptParserBytes = 16u << 20;
  thread_local simdjson::dom::parser parser;
  struct ReleaseLargeBuffers {
    ~ReleaseLargeBuffers() {
      if (parser.capacity() > kKeptParserBytes) parser = simdjson::dom::parser();
    }
  } release;
  // simdjson reports a byte order mark only as "improper structure"; say what it is.
  if (std::string_view(json).substr(0, 3) == "\xEF\xBB\xBF") {
    throw PlanError(origin, "$", "invalid JSON: the file starts with a byte order mark (U+FEFF); JSON text must not");
  }
  element root;
  if (auto error = parser.parse(json).get(root)) {
    if (error == simdjson::NUMBER_ERROR) {
      if (std::optional<BadNumber> bad = locateBadNumber(json)) {
        throw PlanError(origin, bad->path,
                        "the number " + bad->token +
                            " cannot be read: integers must fit in 64 bits, other numbers in a "
                            "double");
      }
    }
    throw PlanError(origin, "$", std::string("invalid JSON: ") + simdjson::error_message(error));
  }
  return Decoder(origin).plan(root);
}

}  // namespace loom
