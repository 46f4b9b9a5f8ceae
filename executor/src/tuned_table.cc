#include "loom/tuned_table.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "environment.hpp"
#include "loom/cache_dir.hpp"
#include "loom/error.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

// A table is a few KiB; anything far larger is not one.
constexpr uint64_t kMaxTableBytes = 16 << 20;

Error invalidTable(const std::string& path, const std::string& where, const std::string& what) {
  return Error(ErrorCategory::kInvalidPlan, "tuned table '" + path + "' at " + where + ": " + what);
}

bool regularFile(const fs::path& path) {
  std::error_code error;
  return fs::symlink_status(path, error).type() == fs::file_type::regular;
}

std::string readText(const std::string& path) {
  if (!regularFile(path)) throw Error(ErrorCategory::kSystem, "tuned table '" + path + "': not a regular file");
  std::error_code error;
  if (fs::file_size(path, error) > kMaxTableBytes || error) {
    throw Error(ErrorCategory::kInvalidPlan, "tuned table '" + path + "': larger than a table can be");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(ErrorCategory::kSystem, "cannot open tuned table '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

TunedMachine machineOf(simdjson::dom::object machine) {
  TunedMachine out;
  out.backend = std::string(std::string_view(machine["backend"]));
  out.gpu = std::string(std::string_view(machine["gpu"]));
  out.gpus = uint32_t(uint64_t(machine["gpus"]));
  out.worldSize = uint32_t(uint64_t(machine["world_size"]));
  out.ranksPerNode = uint32_t(uint64_t(machine["ranks_per_node"]));
  return out;
}

}  // namespace

bool tunedTablesEnabled() {
  const std::optional<std::string> value = processEnvironment("LOOM_TUNED");
  return !value || parseBoolean(*value, "LOOM_TUNED");
}

std::string tunedDirectory() { return (fs::path(cacheRoot()) / "tuned").string(); }

TunedTable readTunedTable(const std::string& path) {
  TunedTable table;
  table.path = path;
  std::string where = "$";
  try {
    simdjson::dom::parser parser;
    simdjson::dom::element document = parser.parse(simdjson::padded_string(readText(path)));
    where = "$.format";
    if (uint64_t(document["format"]) != 1) throw invalidTable(path, where, "expected format 1");
    where = "$.machine";
    table.machine = machineOf(simdjson::dom::object(document["machine"]));
    size_t i = 0;
    for (simdjson::dom::element item : simdjson::dom::array(document["rows"])) {
      where = "$.rows[" + std::to_string(i++) + "]";
      simdjson::dom::object row(item);
      TunedRow out;
      out.collective = std::string(std::string_view(row["collective"]));
      out.minBytes = uint64_t(row["min_bytes"]);
      out.maxBytes = uint64_t(row["max_bytes"]);
      out.planFile = std::string(std::string_view(row["plan"]));
      if (out.planFile.empty() || out.planFile.find('/') != std::string::npos || out.planFile[0] == '.') {
        throw invalidTable(path, where + ".plan", "expected a file name in the table's folder, got \"" + out.planFile + "\"");
      }
      if (out.minBytes > out.maxBytes) throw invalidTable(path, where, "min_bytes is above max_bytes");
      table.rows.push_back(std::move(out));
    }
  } catch (const simdjson::simdjson_error& error) {
    throw invalidTable(path, where, simdjson::error_message(error.error()));
  }
  return table;
}

std::string findTunedTable(const std::string& directory, const TunedMachine& machine) {
  std::error_code error;
  if (!fs::is_directory(directory, error)) return "";
  std::vector<std::string> tables;
  for (const auto& item : fs::directory_iterator(directory, error)) {
    if (item.path().extension() == ".json" && regularFile(item.path())) tables.push_back(item.path().string());
  }
  std::sort(tables.begin(), tables.end());
  for (const std::string& path : tables) {
    try {
      if (readTunedTable(path).machine == machine) return path;
    } catch (const Error&) {
      // Not a table, or a damaged one: the next may be this machine's.
    }
  }
  return "";
}

}  // namespace loom
