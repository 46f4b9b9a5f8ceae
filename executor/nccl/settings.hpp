#pragma once

// The library's environment variables, read when a communicator is created (docs/nccl.md):
//   LOOM_NCCL_DEBUG        VERSION, WARN, INFO or TRACE (unset: NCCL_DEBUG's level; neither: no log)
//   LOOM_NCCL_DEBUG_FILE   where the log goes (%h: host name, %p: process id), else stdout as NCCL
//   LOOM_NCCL_FORCE_NCCL   strict boolean: every call goes to the real NCCL
//   LOOM_NCCL_JIT          strict boolean (default on): compile plans for shapes with none on first use
//   LOOM_NCCL_COLLECTIVES  comma-separated Loom collectives that may run on Loom; the rest forward
//   LOOM_NCCL_LIBRARY      path of the real libnccl.so.2; "none": no forwarding at all
//   LOOM_NCCL_CPU_BACKEND  strict boolean, for tests: Loom's side on the CPU backend, host pointers
//   LOOM_NCCL_STATS        where the coverage report goes as JSON (%h, %p as in LOOM_NCCL_DEBUG_FILE)
//   LOOM_P2P_PACKET_BYTES  send/recv rounds of a pair on one node whose larger message is at most this many
//                          bytes run the eager packet plan (alltoallv_packet); 0 (the default): never
// A variable that is set but malformed is an InvalidArgument error naming it, never a default.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "loom/plan.hpp"

namespace loom::nccl {

enum class LogLevel : uint8_t { kNone, kVersion, kWarn, kInfo, kTrace };

// The largest LOOM_P2P_PACKET_BYTES: the packet plan's capacity per entry (loom.compiler.jit_plans).
inline constexpr uint64_t kMaxP2pPacketBytes = uint64_t(1) << 20;

struct Settings {
  // WARN unless LOOM_NCCL_DEBUG or NCCL_DEBUG says otherwise: what it reports (no plans registered, so
  // every call goes to NCCL; no real NCCL to forward to; a failed call) would otherwise go unseen.
  LogLevel logLevel = LogLevel::kWarn;
  std::string logFile;    // empty: stdout
  std::string statsFile;  // empty: no JSON coverage report
  bool forceNccl = false;
  bool jit = true;  // LOOM_NCCL_JIT: compile a plan on first use for a shape with none (jit_plans.hpp)
  // Bit i set: Collective(i) may run on Loom. All set when LOOM_NCCL_COLLECTIVES is unset.
  uint32_t loomCollectives = ~0u;
  std::string library;  // empty: search; "none": no real NCCL
  bool cpuBackend = false;
  uint64_t p2pPacketBytes = 0;  // LOOM_P2P_PACKET_BYTES (point_to_point.cc)
  // LOOM_P2P_ONE_LAUNCH: a group's k-th rounds with several peers in one launch (point_to_point.cc); off
  // until it has run on GPUs of their own (docs/nccl.md says why).
  bool p2pOneLaunch = false;

  bool allowsOnLoom(Collective collective) const { return (loomCollectives >> uint32_t(collective)) & 1u; }
};

// Throws loom::Error (InvalidArgument) naming the variable and the values it takes.
Settings settingsFromEnvironment();

// 1/0, true/false, yes/no, on/off in any case; nullopt for anything else.
std::optional<bool> parseStrictBoolean(std::string_view text);
std::optional<LogLevel> parseLogLevel(std::string_view text);
// "allreduce,allgather": a bit set over Collective; throws naming `variable` for an unknown name.
uint32_t parseCollectiveList(std::string_view text, const std::string& variable);

}  // namespace loom::nccl
