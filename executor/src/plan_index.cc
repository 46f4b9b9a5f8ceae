#include "plan_index.hpp"

#include <simdjson.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "loom/error.hpp"

namespace loom {
namespace {

// 3: with thread_blocks (what a Placement limits) and content_hash (what a plan read back must be); a folder
// indexed in another format is installed again.
constexpr uint64_t kIndexFormat = 3;

std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

template <typename Enum, size_t N>
Enum enumNamed(std::string_view name, const Enum (&values)[N], std::string_view (*nameOf)(Enum),
               const std::string& where) {
  for (Enum value : values) {
    if (nameOf(value) == name) return value;
  }
  throw Error(ErrorCategory::kInvalidPlan, where + ": unknown value \"" + std::string(name) + "\"");
}

constexpr Collective kCollectives[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                                       Collective::kAllToAll,  Collective::kBroadcast, Collective::kSendRecv,
                                       Collective::kReduce,    Collective::kAllToAllV};
constexpr Protocol kProtocols[] = {Protocol::kSimple, Protocol::kLL};
constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax};

uint32_t narrow(uint64_t value, const std::string& where) {
  if (value > UINT32_MAX)
    throw Error(ErrorCategory::kInvalidPlan, where + ": " + std::to_string(value) + " is too large");
  return uint32_t(value);
}

PlanIndexEntry entryFrom(simdjson::dom::object item, const std::string& where) {
  PlanIndexEntry entry;
  PlanInfo& info = entry.info;
  entry.file = std::string(std::string_view(item["file"]));
  entry.fileBytes = uint64_t(item["file_bytes"]);
  info.name = std::string(std::string_view(item["name"]));
  info.collective =
      enumNamed(std::string_view(item["collective"]), kCollectives, collectiveName, where + ".collective");
  info.worldSize = narrow(uint64_t(item["world_size"]), where + ".world_size");
  info.ranksPerNode = narrow(uint64_t(item["ranks_per_node"]), where + ".ranks_per_node");
  info.minMessageBytes = uint64_t(item["min_message_bytes"]);
  info.maxMessageBytes = uint64_t(item["max_message_bytes"]);
  info.protocol = enumNamed(std::string_view(item["protocol"]), kProtocols, protocolName, where + ".protocol");
  info.inplace = bool(item["inplace"]);
  if (simdjson::dom::element root = item["root"]; !root.is_null()) info.root = narrow(uint64_t(root), where + ".root");
  if (simdjson::dom::element op = item["reduce_op"]; !op.is_null()) {
    info.reduceOp = enumNamed(std::string_view(op), kReduceOps, reduceOpName, where + ".reduce_op");
  }
  info.threadBlocks = narrow(uint64_t(item["thread_blocks"]), where + ".thread_blocks");
  info.contentHash = uint64_t(item["content_hash"]);
  if (entry.file.empty() || entry.file.find('/') != std::string::npos) {
    throw Error(ErrorCategory::kInvalidPlan, where + ".file: expected a file name, got \"" + entry.file + "\"");
  }
  return entry;
}

}  // namespace

std::string planIndexText(const std::vector<PlanIndexEntry>& entries) {
  std::ostringstream out;
  out << "{\"format\": " << kIndexFormat << ", \"plans\": [";
  for (size_t i = 0; i < entries.size(); ++i) {
    const PlanIndexEntry& entry = entries[i];
    const PlanInfo& info = entry.info;
    out << (i == 0 ? "\n" : ",\n") << "{\"file\": " << quoted(entry.file) << ", \"file_bytes\": " << entry.fileBytes
        << ", \"name\": " << quoted(info.name) << ", \"collective\": " << quoted(collectiveName(info.collective))
        << ", \"world_size\": " << info.worldSize << ", \"ranks_per_node\": " << info.ranksPerNode
        << ", \"min_message_bytes\": " << info.minMessageBytes << ", \"max_message_bytes\": " << info.maxMessageBytes
        << ", \"protocol\": " << quoted(protocolName(info.protocol))
        << ", \"inplace\": " << (info.inplace ? "true" : "false")
        << ", \"root\": " << (info.root ? std::to_string(*info.root) : "null")
        << ", \"reduce_op\": " << (info.reduceOp ? quoted(reduceOpName(*info.reduceOp)) : "null")
        << ", \"thread_blocks\": " << info.threadBlocks << ", \"content_hash\": " << info.contentHash << "}";
  }
  out << "]}\n";
  return out.str();
}

std::vector<PlanIndexEntry> readPlanIndex(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw Error(ErrorCategory::kSystem, "cannot open plan index '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << file.rdbuf();
  std::vector<PlanIndexEntry> entries;
  std::string where = "$";
  try {
    simdjson::dom::parser parser;
    simdjson::dom::element document = parser.parse(simdjson::padded_string(text.str()));
    if (uint64_t(document["format"]) != kIndexFormat) {
      throw Error(ErrorCategory::kInvalidPlan, "format: expected " + std::to_string(kIndexFormat));
    }
    size_t i = 0;
    for (simdjson::dom::element item : simdjson::dom::array(document["plans"])) {
      where = "plans[" + std::to_string(i++) + "]";
      entries.push_back(entryFrom(simdjson::dom::object(item), where));
    }
  } catch (const simdjson::simdjson_error& error) {
    throw Error(ErrorCategory::kInvalidPlan,
                "index '" + path + "' at " + where + ": " + simdjson::error_message(error.error()));
  } catch (const Error& error) {
    throw Error(ErrorCategory::kInvalidPlan, "index '" + path + "' at " + error.what());
  }
  return entries;
}

std::string planInfoMismatch(const PlanInfo& info, const Plan& plan) {
  const PlanInfo actual = planInfoFrom(plan, info.source);
  if (actual.name != info.name) return "name";
  if (actual.collective != info.collective) return "collective";
  if (actual.worldSize != info.worldSize) return "world_size";
  if (actual.ranksPerNode != info.ranksPerNode) return "ranks_per_node";
  if (actual.minMessageBytes != info.minMessageBytes) return "min_message_bytes";
  if (actual.maxMessageBytes != info.maxMessageBytes) return "max_message_bytes";
  if (actual.protocol != info.protocol) return "protocol";
  if (actual.inplace != info.inplace) return "inplace";
  if (actual.root != info.root) return "root";
  if (actual.reduceOp != info.reduceOp) return "reduce_op";
  if (actual.threadBlocks != info.threadBlocks) return "thread_blocks";
  if (actual.contentHash != info.contentHash) return "content_hash";
  return "";
}

}  // namespace loom
