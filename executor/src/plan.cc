#include "loom/plan.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "gzip.hpp"
#include "loom/error.hpp"
#include "plan_decoder.hpp"
#include "plan_validation.hpp"

namespace loom {

std::string_view collectiveName(Collective value) {
  switch (value) {
    case Collective::kAllReduce:
      return "allreduce";
    case Collective::kAllGather:
      return "allgather";
    case Collective::kReduceScatter:
      return "reducescatter";
    case Collective::kAllToAll:
      return "alltoall";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kSendRecv:
      return "sendrecv";
    case Collective::kReduce:
      return "reduce";
    case Collective::kAllToAllV:
      return "alltoallv";
  }
  return "?";
}

std::string_view protocolName(Protocol value) { return value == Protocol::kLL ? "ll" : "simple"; }

std::string_view bufferName(BufferType value) {
  switch (value) {
    case BufferType::kInput:
      return "input";
    case BufferType::kOutput:
      return "output";
    case BufferType::kScratch:
      return "scratch";
  }
  return "?";
}

std::string_view channelTypeName(ChannelType value) {
  switch (value) {
    case ChannelType::kMemory:
      return "memory";
    case ChannelType::kPort:
      return "port";
    case ChannelType::kSwitch:
      return "switch";
  }
  return "?";
}

std::string_view reduceOpName(ReduceOp value) {
  switch (value) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

std::string_view dataSyncName(DataSync value) {
  switch (value) {
    case DataSync::kNone:
      return "none";
    case DataSync::kBefore:
      return "before";
    case DataSync::kAfter:
      return "after";
    case DataSync::kBoth:
      return "both";
  }
  return "?";
}

uint32_t GpuProgram::chunks(BufferType buffer) const {
  switch (buffer) {
    case BufferType::kInput:
      return inputChunks;
    case BufferType::kOutput:
      return outputChunks;
    case BufferType::kScratch:
      return scratchChunks;
  }
  return 0;
}

size_t maxPlanBytes() {
  const char* text = std::getenv("LOOM_MAX_PLAN_BYTES");
  if (text == nullptr || *text == '\0') return kDefaultMaxPlanBytes;
  // Digits only: strtoull alone would also take leading spaces, '+' and '-' (which wraps around).
  const bool digitsOnly = std::all_of(text, text + std::strlen(text), [](char c) { return c >= '0' && c <= '9'; });
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (!digitsOnly || errno != 0 || *end != '\0' || value == 0) {
    throw Error(ErrorCategory::kInvalidArgument,
                std::string("LOOM_MAX_PLAN_BYTES: expected a positive number of bytes, got '") + text + "'");
  }
  return static_cast<size_t>(value);
}

static void checkPlanSize(size_t bytes, const std::string& origin) {
  const size_t limit = maxPlanBytes();
  if (bytes > limit) {
    throw PlanError(origin, "$",
                    "the plan is " + std::to_string(bytes) + " bytes, over the limit of " + std::to_string(limit) +
                        " bytes (LOOM_MAX_PLAN_BYTES raises it)");
  }
}

static Plan decodeAndValidate(simdjson::padded_string_view json, const std::string& origin) {
  Plan plan = decodePlan(json, origin);
  validatePlan(plan, origin);
  plan.contentHash = std::hash<std::string_view>{}(std::string_view(json.data(), json.size()));
  plan.text.assign(json.data(), json.size());
  return plan;
}

Plan Plan::parse(std::string_view json, const std::string& origin) {
  checkPlanSize(json.size(), origin);
  return decodeAndValidate(simdjson::padded_string(json), origin);
}

Plan Plan::load(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) {
    throw Error(ErrorCategory::kInvalidArgument, "cannot open plan file '" + path + "': " + std::strerror(errno));
  }
  const std::streamoff size = file.tellg();
  if (size < 0) throw Error(ErrorCategory::kSystem, "cannot read plan file '" + path + "'");
  // Refuse an oversized file before reading it into memory.
  checkPlanSize(static_cast<size_t>(size), path);
  // Read straight into simdjson's padded buffer: no second copy of a large plan.
  simdjson::padded_string text(static_cast<size_t>(size));
  file.seekg(0);
  if (!file.read(text.data(), size)) {
    throw Error(ErrorCategory::kSystem, "cannot read plan file '" + path + "': " + std::strerror(errno));
  }
  // Installed bundled plans are gzip files (NAME.json.gz); any plan file may be. Told apart by content,
  // not by name: JSON never starts with gzip's magic number.
  if (isGzip(std::string_view(text.data(), text.size()))) {
    const std::string json = gzipDecompress(std::string_view(text.data(), text.size()), maxPlanBytes(), path);
    return decodeAndValidate(simdjson::padded_string(json), path);
  }
  return decodeAndValidate(text, path);
}

namespace {

std::optional<ReduceOp> firstReduceOp(const std::vector<Op>& ops) {
  for (const Op& op : ops) {
    if (op.reduceOp) return op.reduceOp;
    if (auto inBody = firstReduceOp(op.body)) return inBody;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ReduceOp> planReduceOp(const Plan& plan) {
  for (const GpuProgram& gpu : plan.gpus) {
    for (const ThreadBlock& tb : gpu.threadblocks) {
      if (auto op = firstReduceOp(tb.ops)) return op;
    }
  }
  return std::nullopt;
}

const GpuProgram& Plan::gpu(uint32_t rank) const {
  for (const GpuProgram& program : gpus) {
    if (program.rank == rank) return program;
  }
  throw Error(ErrorCategory::kInvalidArgument, "rank: plan '" + name + "' has no program for rank " +
                                                   std::to_string(rank) + " (world_size " + std::to_string(worldSize) +
                                                   ")");
}

static void countOps(const std::vector<Op>& ops, PlanSummary& summary) {
  for (const Op& op : ops) {
    ++summary.opsByType[static_cast<size_t>(op.type)];
    countOps(op.body, summary);
  }
}

PlanSummary summarize(const Plan& plan) {
  PlanSummary summary;
  for (const GpuProgram& gpu : plan.gpus) {
    summary.threadblocks += gpu.threadblocks.size();
    summary.maxThreadblocksPerRank = std::max<uint64_t>(summary.maxThreadblocksPerRank, gpu.threadblocks.size());
    summary.maxScratchChunks = std::max(summary.maxScratchChunks, gpu.scratchChunks);
    summary.channels += gpu.channels.size();
    for (const ThreadBlock& tb : gpu.threadblocks) countOps(tb.ops, summary);
  }
  return summary;
}

}  // namespace loom
