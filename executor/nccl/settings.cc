#include "settings.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "loom/error.hpp"

namespace loom::nccl {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

// Unset and empty read the same, as NCCL reads its variables.
std::optional<std::string> variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

Error invalid(const std::string& message) { return Error(ErrorCategory::kInvalidArgument, message); }

bool booleanVariable(const char* name) {
  auto text = variable(name);
  if (!text) return false;
  auto value = parseStrictBoolean(*text);
  if (!value) {
    throw invalid(std::string(name) + "='" + *text + "': expected 1/0, true/false, yes/no or on/off");
  }
  return *value;
}

constexpr Collective kLoomCollectives[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                                           Collective::kAllToAll,  Collective::kBroadcast, Collective::kSendRecv,
                                           Collective::kReduce};

}  // namespace

std::optional<bool> parseStrictBoolean(std::string_view text) {
  const std::string value = lower(text);
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off") return false;
  return std::nullopt;
}

std::optional<LogLevel> parseLogLevel(std::string_view text) {
  const std::string value = lower(text);
  if (value == "version") return LogLevel::kVersion;
  if (value == "warn") return LogLevel::kWarn;
  if (value == "info") return LogLevel::kInfo;
  if (value == "trace") return LogLevel::kTrace;
  return std::nullopt;
}

uint32_t parseCollectiveList(std::string_view text, const std::string& variable) {
  uint32_t bits = 0;
  while (true) {
    const size_t comma = text.find(',');
    const std::string name = lower(trim(text.substr(0, comma)));
    bool known = false;
    for (Collective collective : kLoomCollectives) {
      if (name == collectiveName(collective)) {
        bits |= 1u << uint32_t(collective);
        known = true;
      }
    }
    if (!known) {
      throw invalid(variable + ": '" + name +
                    "' is not a Loom collective (allreduce, allgather, reducescatter, alltoall, broadcast, reduce, "
                    "sendrecv)");
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return bits;
}

Settings settingsFromEnvironment() {
  Settings settings;
  if (auto debug = variable("LOOM_NCCL_DEBUG")) {
    auto level = parseLogLevel(*debug);
    if (!level) throw invalid("LOOM_NCCL_DEBUG='" + *debug + "': expected VERSION, WARN, INFO or TRACE");
    settings.logLevel = *level;
  } else if (auto ncclDebug = variable("NCCL_DEBUG")) {
    // NCCL's own variable: a value only NCCL knows (ABORT) is NCCL's business, not an error here.
    settings.logLevel = parseLogLevel(*ncclDebug).value_or(LogLevel::kNone);
  }
  settings.logFile = variable("LOOM_NCCL_DEBUG_FILE").value_or("");
  settings.statsFile = variable("LOOM_NCCL_STATS").value_or("");
  settings.forceNccl = booleanVariable("LOOM_NCCL_FORCE_NCCL");
  settings.jit = variable("LOOM_NCCL_JIT") ? booleanVariable("LOOM_NCCL_JIT") : true;
  if (auto list = variable("LOOM_NCCL_COLLECTIVES")) {
    settings.loomCollectives = parseCollectiveList(*list, "LOOM_NCCL_COLLECTIVES");
  }
  settings.library = variable("LOOM_NCCL_LIBRARY").value_or("");
  settings.cpuBackend = booleanVariable("LOOM_NCCL_CPU_BACKEND");
  settings.p2pOneLaunch = booleanVariable("LOOM_P2P_ONE_LAUNCH");
  if (auto text = variable("LOOM_P2P_PACKET_BYTES")) {
    const std::string_view digits = trim(*text);
    uint64_t value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error != std::errc() || end != digits.data() + digits.size() || value > kMaxP2pPacketBytes) {
      throw invalid("LOOM_P2P_PACKET_BYTES='" + *text + "': expected a byte count from 0 (off) to " +
                    std::to_string(kMaxP2pPacketBytes));
    }
    settings.p2pPacketBytes = value;
  }
  return settings;
}

}  // namespace loom::nccl
