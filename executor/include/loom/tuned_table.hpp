#pragma once

// A machine's own measurements: what `loom tune` found fastest per collective and size on this machine,
// kept in <cache root>/tuned/<machine key>.json with the plans it names in <cache root>/tuned/<machine key>/.
// The plan registry takes the table whose machine is the communicator's before the bundled plans
// (PlanSource::kTuned, for the size ranges of its rows); LOOM_TUNED=0 ignores every table. A table is
// written only by `loom tune` (compiler/loom/tools/tune.py), which proves every plan in it and keeps only
// plans that fit the placement it measured.
//
//   {"format": 1, "key": "nvidia-h200_x1_w4_r4",
//    "machine": {"backend": "gpu", "gpu": "NVIDIA H200", "gpus": 1, "world_size": 4, "ranks_per_node": 4},
//    "rows": [{"collective": "allreduce", "min_bytes": 0, "max_bytes": 5792, "plan": "tuned_....json"}, ...],
//    ...}                              (measurements, date and versions beside: the registry reads the above)

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct TunedMachine {
  std::string backend;  // "gpu" or "cpu" (the CPU backend)
  std::string gpu;      // the GPU's name ("" on the CPU backend)
  uint32_t gpus = 0;    // GPUs of the host
  uint32_t worldSize = 0;
  uint32_t ranksPerNode = 0;
  bool operator==(const TunedMachine&) const = default;
};

struct TunedRow {
  std::string collective;
  uint64_t minBytes = 0;
  uint64_t maxBytes = 0;
  std::string planFile;  // in the table's folder
};

struct TunedTable {
  std::string path;
  TunedMachine machine;
  std::vector<TunedRow> rows;
};

// LOOM_TUNED: 1/0, true/false, yes/no, on/off (default on).
bool tunedTablesEnabled();
// <cache root>/tuned.
std::string tunedDirectory();
// Decodes a table; an InvalidPlan error naming the file and the JSON path when it is not one.
TunedTable readTunedTable(const std::string& path);
// The table in `directory` whose machine is `machine` (never through a symbolic link), or "" when none.
std::string findTunedTable(const std::string& directory, const TunedMachine& machine);

}  // namespace loom
