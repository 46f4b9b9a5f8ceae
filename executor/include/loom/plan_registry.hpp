#pragma once

// The plan registry and the per-call selector. Plans are registered with metadata (where it fits:
// collective, world size, ranks per node, message size range, in-place, data types; and how to rank
// it: user or bundled, tags, priority). Per call a request describes the collective, and the
// selector picks a plan among the registered ones that fit, or none. The default selector prefers
// user plans to bundled ones, then the narrowest size range, then the highest priority, then the
// earliest registration. A selection is cached per request, so a hot-path call costs one hash
// lookup; registering, unregistering or changing the selector clears the cache.
//
// One registry serves the process (PlanRegistry::global()); all members are thread-safe. Bundled
// plans are read from <cache root>/default (cache_dir.hpp) the first time an Executor is created.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/data_type.hpp"
#include "loom/plan.hpp"
#include "loom/tuned_table.hpp"

namespace loom {

// In the default selector's order: the user's plans, then a machine's own measurements (`loom tune`,
// tuned_table.hpp), then the bundled ones.
enum class PlanSource : uint8_t { kUser, kBundled, kTuned };
int sourceRank(PlanSource source);  // 0 user, 1 tuned, 2 bundled
std::string_view planSourceName(PlanSource source);

// Where a call's plan will run. The interpreter blocks of one call wait for one another, so all of them
// must be resident at once: those of every rank sharing the GPU (ranksSharingGpu, more than one only in
// the testing mode LOOM_SHARE_GPU=1) within residentBlocks, the blocks the GPU holds at once
// (gpu_sharing.hpp). A plan fits when its busiest rank's blocks times ranksSharingGpu are at most
// residentBlocks. The default, no limit, is a request that says nothing of where it runs.
struct Placement {
  uint32_t ranksSharingGpu = 1;
  uint32_t residentBlocks = UINT32_MAX;
  // The most thread blocks a rank's plan may have here.
  uint32_t threadBlocksPerRank() const { return residentBlocks / (ranksSharingGpu == 0 ? 1 : ranksSharingGpu); }
  bool limited() const { return residentBlocks != UINT32_MAX; }
  bool operator==(const Placement&) const = default;
};

// Where a registered plan fits and how it ranks. Built from the plan by planInfoFrom(); a caller may
// narrow the size range (never widen it past the plan's own), restrict data types, add tags.
struct PlanInfo {
  std::string name;
  Collective collective = Collective::kAllReduce;
  uint32_t worldSize = 1;
  uint32_t ranksPerNode = 1;
  uint64_t minMessageBytes = 0;
  uint64_t maxMessageBytes = 0;
  Protocol protocol = Protocol::kSimple;
  bool inplace = false;
  std::optional<uint32_t> root;      // broadcast plans: the rank whose data goes out; reduce: the one that receives
  std::optional<ReduceOp> reduceOp;  // the operator its reductions use; none for plans that only move data
  std::vector<DataType> dataTypes;   // empty: every data type
  std::vector<std::string> tags;     // a request's tags must all be among these
  int32_t priority = 0;              // higher wins among equally narrow fits
  PlanSource source = PlanSource::kUser;
  uint32_t threadBlocks = 0;  // the most thread blocks of any of its ranks (what a Placement limits)
  uint64_t contentHash = 0;   // Plan::contentHash: a bundled plan read back must be the text the installer wrote
};
PlanInfo planInfoFrom(const Plan& plan, PlanSource source = PlanSource::kUser);

// A registered plan. Those of an installed plans folder with an index (the bundled plans) are registered
// from the index and decoded on first use: decoding every one at start-up would cost each process that
// creates an Executor the whole set, tens of MiB of JSON, where a job runs a few.
class RegisteredPlan {
 public:
  RegisteredPlan(PlanInfo info, std::shared_ptr<const Plan> plan, uint64_t sequence);
  // Deferred: the plan file `path` is decoded by the first plan() call.
  RegisteredPlan(PlanInfo info, std::string path, uint64_t sequence);

  PlanInfo info;
  uint64_t sequence = 0;  // registration order

  // The plan. A deferred one is decoded now if it was not yet; a file that fails to load, or no longer
  // matches `info`, throws an error naming the file (again on every later call).
  std::shared_ptr<const Plan> plan() const;
  // The file of a deferred plan ("" for one registered decoded).
  const std::string& path() const;

 private:
  struct Deferred;
  std::shared_ptr<const Plan> plan_;
  std::shared_ptr<Deferred> deferred_;
};
using PlanEntry = std::shared_ptr<const RegisteredPlan>;

// One call, as the selector sees it.
struct SelectionRequest {
  Collective collective = Collective::kAllReduce;
  uint64_t messageBytes = 0;  // this rank's input bytes
  DataType dataType = DataType::kFloat32;
  uint32_t worldSize = 1;
  uint32_t ranksPerNode = 1;
  bool inplace = false;
  bool capturing = false;  // a CUDA graph is being captured on the call's stream
  std::optional<uint32_t> root;
  ReduceOp op = ReduceOp::kSum;  // the call's operator: a reducing plan must use this one
  std::vector<std::string> tags;
  Placement placement;                // where it runs: plans whose blocks do not fit there are no candidates
  std::vector<PlanEntry> candidates;  // the registered plans that fit, best first (default order)
};

// Returns a plan for the request (usually one of its candidates) or nullptr for none.
using Selector = std::function<std::shared_ptr<const Plan>(const SelectionRequest&)>;

// Whether `entry` fits `request` (collective, shape, in-place, root, size, data type, operator, tags) and its
// thread blocks fit the request's placement.
bool planFits(const PlanInfo& info, const SelectionRequest& request);
// Whether the plan's thread blocks fit `placement` (part of planFits).
bool fitsPlacement(const PlanInfo& info, const Placement& placement);
// Why a plan does not fit `placement`, with the numbers ("" when it fits).
std::string placementShortfall(const PlanInfo& info, const Placement& placement);
// The default selector's order: user before bundled, narrower range, higher priority, earlier.
bool rankedBefore(const RegisteredPlan& a, const RegisteredPlan& b);

struct RegistryStats {
  uint64_t selections = 0;  // select() calls
  uint64_t cacheHits = 0;   // answered from the cache
  uint64_t selectorCalls = 0;
};

class PlanRegistry {
 public:
  PlanRegistry() = default;
  PlanRegistry(const PlanRegistry&) = delete;
  PlanRegistry& operator=(const PlanRegistry&) = delete;

  static PlanRegistry& global();

  // Registers `plan` under info.name. A name already registered is an error, unless `replace`:
  // then the old entry goes. Returns the entry.
  PlanEntry add(std::shared_ptr<const Plan> plan, PlanInfo info, bool replace = false);
  // Removes the named plan; false if there was none.
  bool remove(const std::string& name);
  // Removes every plan of `source` (all when nullopt).
  void clear(std::optional<PlanSource> source = std::nullopt);
  PlanEntry find(const std::string& name) const;
  // Registered plans in the default selector's order.
  std::vector<PlanEntry> list() const;

  // nullptr (or an empty function) restores the default selector.
  void setSelector(Selector selector);

  // The plan for one call, or nullptr when the selector finds none. Cached per request key (the
  // request without its candidates).
  std::shared_ptr<const Plan> select(const SelectionRequest& request);
  // As select(), but no plan is an InvalidArgument error that says what was asked for and which
  // plans of that collective and world size are registered.
  std::shared_ptr<const Plan> selectOrThrow(const SelectionRequest& request);
  // The candidates of `request` in the default order (what the selector is handed).
  std::vector<PlanEntry> candidates(const SelectionRequest& request) const;
  // The plans that would be candidates of `request` but for its placement, in the default order.
  std::vector<PlanEntry> passedOver(const SelectionRequest& request) const;

  // Registers every *.json and *.json.gz in `directory` as `source` plans, skipping names already
  // registered. A file its folder's index (.index, written by the installer, default_plans.hpp) lists
  // at its present size is registered from the index and decoded on first use; any other is decoded
  // now. Files that fail to load are skipped and returned as "path: error" lines; a deferred plan that
  // fails when it is first selected by the default selector is reported on stderr, unregistered, and
  // the next candidate taken.
  std::vector<std::string> loadDirectory(const std::string& directory, PlanSource source);
  // Loads <cache root>/default once per process and cache root (later calls return at once, unless
  // LOOM_CACHE_DIR now names another root); returns its skip list.
  std::vector<std::string> ensureDefaultPlansLoaded();
  // Registers the plans of the tuned table at `path` (tuned_table.hpp) as kTuned plans for the size ranges
  // its rows give; returns what was skipped ("file: why").
  std::vector<std::string> loadTunedTable(const std::string& path);
  // The table of <cache root>/tuned whose machine is `machine`, loaded once per process, cache root and
  // machine (nothing with LOOM_TUNED=0); returns its skip list.
  std::vector<std::string> ensureTunedTableLoaded(const TunedMachine& machine);

  RegistryStats stats() const;

 private:
  struct CacheKey {
    Collective collective;
    uint64_t messageBytes;
    DataType dataType;
    uint32_t worldSize;
    uint32_t ranksPerNode;
    bool inplace;
    bool capturing;
    int64_t root;
    ReduceOp op;
    std::vector<std::string> tags;
    Placement placement;
    bool operator==(const CacheKey&) const = default;
  };
  struct CacheKeyHash {
    size_t operator()(const CacheKey& key) const;
  };
  static CacheKey keyOf(const SelectionRequest& request);
  std::vector<PlanEntry> candidatesLocked(const SelectionRequest& request) const;
  void addDeferred(PlanInfo info, std::string path);
  std::shared_ptr<const Plan> firstThatLoads(const std::vector<PlanEntry>& candidates);
  void invalidateLocked();

  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, PlanEntry> plans_;
  Selector selector_;
  uint64_t sequence_ = 0;
  std::unordered_map<CacheKey, std::shared_ptr<const Plan>, CacheKeyHash> cache_;
  uint64_t generation_ = 0;  // bumped by every change: a selection made before it is not cached
  std::mutex defaultPlansMutex_;
  std::optional<std::string> defaultPlansFrom_;
  std::vector<std::string> defaultPlansSkipped_;
  std::set<std::string> tunedTablesLoaded_;  // table paths, guarded by defaultPlansMutex_
  std::atomic<uint64_t> selections_{0};
  std::atomic<uint64_t> cacheHits_{0};
  std::atomic<uint64_t> selectorCalls_{0};
};

}  // namespace loom
