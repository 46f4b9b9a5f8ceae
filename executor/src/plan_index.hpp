#pragma once

// The index of an installed plans folder (<cache root>/default/.index): per plan file, its size and
// the metadata the registry selects by. The installer writes it (default_plans_install.cc) from the
// decoded plans; the registry registers the plans from it and decodes each on its first use, so a
// process that starts pays for the plans it runs, not for every bundled one.
//
// JSON, one plan a line:
//   {"format": 3, "plans": [
//   {"file": "NAME.json.gz", "file_bytes": 1234, "name": "NAME", "collective": "allreduce", "world_size": 2,
//    "ranks_per_node": 2, "min_message_bytes": 0, "max_message_bytes": 5793, "protocol": "ll",
//    "inplace": false, "root": null, "reduce_op": "sum", "thread_blocks": 16,
//    "content_hash": 1234567890123},
//   ...]}

#include <cstdint>
#include <string>
#include <vector>

#include "loom/plan_registry.hpp"

namespace loom {

inline constexpr char kPlanIndexName[] = ".index";

struct PlanIndexEntry {
  std::string file;        // name within the folder
  uint64_t fileBytes = 0;  // its size: a file that was replaced since the index was written no longer matches
  PlanInfo info;           // what planInfoFrom() gives for the plan (its source left to the reader)
};

std::string planIndexText(const std::vector<PlanIndexEntry>& entries);
// Throws an InvalidPlan error naming `path` (and the entry) when the file is not such an index.
std::vector<PlanIndexEntry> readPlanIndex(const std::string& path);

// The first field (by its index name) in which `info` does not describe `plan`, or "" when it does.
std::string planInfoMismatch(const PlanInfo& info, const Plan& plan);

}  // namespace loom
