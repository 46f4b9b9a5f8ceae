#include "coverage.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "log.hpp"

namespace loom::nccl {

// Every communicator's table of the process, kept until exit so that the JSON file holds the destroyed
// ones too.
struct CoverageReport {
  std::mutex mutex;
  std::vector<std::shared_ptr<CommunicatorCoverage>> communicators;
  std::string statsFile;  // the first communicator's LOOM_NCCL_STATS, as NCCL reads its variables once

  static CoverageReport& process() {
    // Never destroyed: the exit handler below may run after static destructors.
    static CoverageReport& report = *new CoverageReport();
    return report;
  }

  struct Totals {
    uint64_t loomCalls = 0, loomBytes = 0, betweenRanksCalls = 0, betweenRanksBytes = 0;
  };

  // The Loom-plan share counts only calls that move data between ranks: a plan or the real NCCL ran
  // them (empty calls and the copies of one rank are neither).
  static Totals totals(const CommunicatorCoverage& coverage) {
    Totals totals;
    forEachRow(coverage, [&](size_t, Route route, size_t, uint64_t calls, uint64_t bytes) {
      if (route == Route::kNothing || route == Route::kLocalCopy) return;
      totals.betweenRanksCalls += calls;
      totals.betweenRanksBytes += bytes;
      if (route == Route::kLoom) {
        totals.loomCalls += calls;
        totals.loomBytes += bytes;
      }
    });
    return totals;
  }

  // The cells that counted a call, in the order of Call, Route and Reason (with the report's mutex held).
  template <typename Visit>
  static void forEachRow(const CommunicatorCoverage& coverage, Visit&& visit) {
    if (!coverage.cells_) {
      for (const auto& row : coverage.rows_)
        visit(size_t(row.call), row.route, size_t(row.reason), row.calls, row.bytes);
      return;
    }
    for (size_t call = 0; call < CommunicatorCoverage::kCalls; ++call) {
      for (size_t route = 0; route < CommunicatorCoverage::kRoutes; ++route) {
        for (size_t reason = 0; reason < CommunicatorCoverage::kReasons; ++reason) {
          const auto& cell = (*coverage.cells_)[call][route][reason];
          const uint64_t calls = cell.calls.load(std::memory_order_relaxed);
          if (calls != 0) visit(call, Route(route), reason, calls, cell.bytes.load(std::memory_order_relaxed));
        }
      }
    }
  }

  static std::string percent(uint64_t part, uint64_t whole) {
    if (whole == 0) return "-";
    char text[16];
    std::snprintf(text, sizeof(text), "%.1f%%", 100.0 * double(part) / double(whole));
    return text;
  }

  static void log(const CommunicatorCoverage& coverage) {
    if (!logEnabled(LogLevel::kInfo)) return;
    const auto& id = coverage.identity_;
    const Totals sums = totals(coverage);
    logLine(LogLevel::kInfo, id.cudaDevice,
            "coverage of comm " + std::to_string(id.serial) + " (" + id.origin + ") rank " + std::to_string(id.rank) +
                "/" + std::to_string(id.worldSize) + ": Loom plans ran " + std::to_string(sums.loomCalls) + " of " +
                std::to_string(sums.betweenRanksCalls) + " calls between ranks (" +
                percent(sums.loomCalls, sums.betweenRanksCalls) + ") and " + std::to_string(sums.loomBytes) + " of " +
                std::to_string(sums.betweenRanksBytes) + " bytes (" + percent(sums.loomBytes, sums.betweenRanksBytes) +
                "), in " + std::to_string(coverage.launches_.load(std::memory_order_relaxed)) + " launches");
    forEachRow(coverage, [&](size_t call, Route route, size_t reason, uint64_t calls, uint64_t bytes) {
      char row[200];
      std::snprintf(row, sizeof(row), "  %-13s %-10s %-24s %10llu calls %16llu bytes",
                    std::string(callName(Call(call))).c_str(), std::string(routeName(route)).c_str(),
                    std::string(reasonName(Reason(reason))).c_str(), static_cast<unsigned long long>(calls),
                    static_cast<unsigned long long>(bytes));
      logLine(LogLevel::kInfo, id.cudaDevice, row);
    });
  }

  static std::string quoted(const std::string& text) {
    std::string out = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    return out + "\"";
  }

  // The whole process's tables as one JSON document, written through a temporary file and a rename.
  void writeJson() {
    if (statsFile.empty()) return;
    std::ostringstream out;
    out << "{\"format\": \"loom-nccl-coverage\", \"version\": 1, \"host\": " << quoted(expandPathPattern("%h"))
        << ", \"pid\": " << getpid() << ", \"communicators\": [";
    for (size_t i = 0; i < communicators.size(); ++i) {
      const CommunicatorCoverage& coverage = *communicators[i];
      const auto& id = coverage.identity_;
      out << (i ? ",\n" : "\n") << " {\"serial\": " << id.serial << ", \"origin\": " << quoted(id.origin)
          << ", \"rank\": " << id.rank << ", \"world_size\": " << id.worldSize << ", \"cuda_device\": " << id.cudaDevice
          << ", \"closed\": " << (coverage.closed_ ? "true" : "false")
          << ", \"launches\": " << coverage.launches_.load(std::memory_order_relaxed) << ", \"rows\": [";
      bool first = true;
      forEachRow(coverage, [&](size_t call, Route route, size_t reason, uint64_t calls, uint64_t bytes) {
        out << (first ? "" : ", ") << "{\"call\": " << quoted(std::string(callName(Call(call))))
            << ", \"route\": " << quoted(std::string(routeName(route)))
            << ", \"reason\": " << quoted(std::string(reasonName(Reason(reason)))) << ", \"calls\": " << calls
            << ", \"bytes\": " << bytes << "}";
        first = false;
      });
      out << "]}";
    }
    out << "\n]}\n";
    const std::string path = expandPathPattern(statsFile);
    const std::string temporary = path + ".tmp" + std::to_string(getpid());
    {
      std::ofstream file(temporary);
      file << out.str();
      if (!file) {
        logLine(LogLevel::kWarn, -1, "LOOM_NCCL_STATS: cannot write " + temporary);
        return;
      }
    }
    std::error_code error;
    std::filesystem::rename(temporary, path, error);
    if (error) logLine(LogLevel::kWarn, -1, "LOOM_NCCL_STATS: cannot write " + path + ": " + error.message());
  }

  // At exit: the communicators never destroyed (torch often leaves them) are reported as they stand.
  static void atExit() {
    CoverageReport& report = process();
    std::lock_guard lock(report.mutex);
    for (const auto& coverage : report.communicators) {
      if (!coverage->closed_) log(*coverage);
    }
    report.writeJson();
  }
};

std::shared_ptr<CommunicatorCoverage> CommunicatorCoverage::create(Identity identity, std::string statsFile) {
  std::shared_ptr<CommunicatorCoverage> coverage(new CommunicatorCoverage(std::move(identity)));
  CoverageReport& report = CoverageReport::process();
  std::lock_guard lock(report.mutex);
  if (report.communicators.empty()) {
    report.statsFile = std::move(statsFile);
    std::atexit(CoverageReport::atExit);
  }
  report.communicators.push_back(coverage);
  return coverage;
}

void CommunicatorCoverage::close() {
  CoverageReport& report = CoverageReport::process();
  std::lock_guard lock(report.mutex);
  if (closed_) return;
  closed_ = true;
  CoverageReport::log(*this);
  CoverageReport::forEachRow(*this, [&](size_t call, Route route, size_t reason, uint64_t calls, uint64_t bytes) {
    rows_.push_back({Call(call), route, Reason(reason), calls, bytes});
  });
  cells_.reset();
  report.writeJson();
}

}  // namespace loom::nccl
