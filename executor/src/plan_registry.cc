#include "loom/plan_registry.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <unordered_map>

#include "loom/cache_dir.hpp"
#include "loom/error.hpp"
#include "plan_index.hpp"

namespace loom {
namespace {

// Bound of the selection cache: a process sees few distinct (collective, size, dtype) keys; one that
// sweeps sizes starts over rather than growing without end.
constexpr size_t kMaxCachedSelections = 4096;

Error invalid(const std::string& message) { return Error(ErrorCategory::kInvalidArgument, message); }

std::string describe(const SelectionRequest& request) {
  std::ostringstream out;
  const bool reducing =
      request.collective == Collective::kAllReduce || request.collective == Collective::kReduceScatter ||
      request.collective == Collective::kReduce;
  out << collectiveName(request.collective) << " of " << request.messageBytes << " bytes ("
      << dataTypeName(request.dataType) << (reducing ? ", " + std::string(reduceOpName(request.op)) : "") << ", "
      << (request.inplace ? "in place" : "out of place") << ") over "
      << request.worldSize << " ranks, " << request.ranksPerNode << " per node";
  if (request.root) out << ", root " << *request.root;
  if (!request.tags.empty()) {
    out << ", tags";
    for (const std::string& tag : request.tags) out << " '" << tag << "'";
  }
  return out.str();
}

}  // namespace

struct RegisteredPlan::Deferred {
  std::string path;
  std::mutex mutex;  // one thread decodes; the others wait for its plan
  std::shared_ptr<const Plan> plan;
  std::string error;  // why it failed, kept so that a broken file is read once
};

RegisteredPlan::RegisteredPlan(PlanInfo info, std::shared_ptr<const Plan> plan, uint64_t sequence)
    : info(std::move(info)), sequence(sequence), plan_(std::move(plan)) {}

RegisteredPlan::RegisteredPlan(PlanInfo info, std::string path, uint64_t sequence)
    : info(std::move(info)), sequence(sequence), deferred_(std::make_shared<Deferred>()) {
  deferred_->path = std::move(path);
}

std::shared_ptr<const Plan> RegisteredPlan::plan() const {
  if (!deferred_) return plan_;
  std::lock_guard lock(deferred_->mutex);
  if (!deferred_->plan && deferred_->error.empty()) {
    try {
      auto plan = std::make_shared<const Plan>(Plan::load(deferred_->path));
      if (std::string field = planInfoMismatch(info, *plan); !field.empty()) {
        deferred_->error = deferred_->path + ": its " + field + " is not what " + std::string(kPlanIndexName) +
                           " says (a file replaced since it was installed? `loom install-plans --force` "
                           "reinstalls the bundled plans)";
      } else {
        deferred_->plan = std::move(plan);
      }
    } catch (const std::exception& e) {
      deferred_->error = e.what();
    }
  }
  if (!deferred_->error.empty()) throw Error(ErrorCategory::kInvalidPlan, deferred_->error);
  return deferred_->plan;
}

const std::string& RegisteredPlan::path() const {
  static const std::string none;
  return deferred_ ? deferred_->path : none;
}

std::string_view planSourceName(PlanSource source) {
  switch (source) {
    case PlanSource::kUser:
      return "user";
    case PlanSource::kTuned:
      return "tuned";
    case PlanSource::kBundled:
      return "bundled";
  }
  return "?";
}

int sourceRank(PlanSource source) {
  return source == PlanSource::kUser ? 0 : source == PlanSource::kTuned ? 1 : 2;
}

PlanInfo planInfoFrom(const Plan& plan, PlanSource source) {
  PlanInfo info;
  info.name = plan.name;
  info.collective = plan.collective;
  info.worldSize = plan.worldSize;
  info.ranksPerNode = plan.ranksPerNode;
  info.minMessageBytes = plan.minMessageBytes;
  info.maxMessageBytes = plan.maxMessageBytes;
  info.protocol = plan.protocol;
  info.inplace = plan.inplace;
  info.root = plan.root;
  info.reduceOp = planReduceOp(plan);
  info.source = source;
  info.contentHash = plan.contentHash;
  for (const GpuProgram& gpu : plan.gpus) info.threadBlocks = std::max(info.threadBlocks, uint32_t(gpu.threadblocks.size()));
  return info;
}

bool fitsPlacement(const PlanInfo& info, const Placement& placement) {
  return info.threadBlocks <= placement.threadBlocksPerRank();
}

std::string placementShortfall(const PlanInfo& info, const Placement& placement) {
  if (fitsPlacement(info, placement)) return "";
  const std::string ranks = placement.ranksSharingGpu > 1
                                ? std::to_string(placement.ranksSharingGpu) + " ranks sharing the GPU"
                                : std::string("a rank with the GPU to itself");
  return std::to_string(info.threadBlocks) + " thread blocks per rank, but " + ranks + " may run at most " +
         std::to_string(placement.threadBlocksPerRank()) + " each (the GPU holds " +
         std::to_string(placement.residentBlocks) + " interpreter blocks at once)";
}

bool planFits(const PlanInfo& info, const SelectionRequest& request) {
  if (info.collective != request.collective || info.worldSize != request.worldSize ||
      info.ranksPerNode != request.ranksPerNode || info.inplace != request.inplace) {
    return false;
  }
  if (request.messageBytes < info.minMessageBytes || request.messageBytes > info.maxMessageBytes) return false;
  const bool rooted = info.collective == Collective::kBroadcast || info.collective == Collective::kReduce;
  if (rooted && info.root != request.root) return false;
  if (info.reduceOp && *info.reduceOp != request.op) return false;
  if (!info.dataTypes.empty() &&
      std::find(info.dataTypes.begin(), info.dataTypes.end(), request.dataType) == info.dataTypes.end()) {
    return false;
  }
  const bool tagged = std::all_of(request.tags.begin(), request.tags.end(), [&](const std::string& tag) {
    return std::find(info.tags.begin(), info.tags.end(), tag) != info.tags.end();
  });
  return tagged && fitsPlacement(info, request.placement);
}

bool rankedBefore(const RegisteredPlan& a, const RegisteredPlan& b) {
  if (a.info.source != b.info.source) return sourceRank(a.info.source) < sourceRank(b.info.source);
  const uint64_t widthA = a.info.maxMessageBytes - a.info.minMessageBytes;
  const uint64_t widthB = b.info.maxMessageBytes - b.info.minMessageBytes;
  if (widthA != widthB) return widthA < widthB;
  if (a.info.priority != b.info.priority) return a.info.priority > b.info.priority;
  return a.sequence < b.sequence;
}

PlanRegistry& PlanRegistry::global() {
  static PlanRegistry registry;
  return registry;
}

PlanEntry PlanRegistry::add(std::shared_ptr<const Plan> plan, PlanInfo info, bool replace) {
  if (!plan) throw invalid("plan: expected a plan, got none");
  if (info.name.empty()) throw invalid("name: a registered plan needs a name");
  if (info.minMessageBytes > info.maxMessageBytes) {
    throw invalid("min_message_bytes: " + std::to_string(info.minMessageBytes) + " is above max_message_bytes " +
                  std::to_string(info.maxMessageBytes));
  }
  if (info.minMessageBytes < plan->minMessageBytes || info.maxMessageBytes > plan->maxMessageBytes) {
    throw invalid("message size range: [" + std::to_string(info.minMessageBytes) + ", " +
                  std::to_string(info.maxMessageBytes) + "] reaches outside plan '" + plan->name + "''s own [" +
                  std::to_string(plan->minMessageBytes) + ", " + std::to_string(plan->maxMessageBytes) + "]");
  }
  std::unique_lock lock(mutex_);
  if (!replace && plans_.count(info.name) != 0) {
    throw invalid("name: a plan named '" + info.name + "' is registered already (unregister it, or replace it)");
  }
  auto entry = std::make_shared<RegisteredPlan>(std::move(info), std::move(plan), ++sequence_);
  plans_[entry->info.name] = entry;
  invalidateLocked();
  return entry;
}

void PlanRegistry::addDeferred(PlanInfo info, std::string path) {
  std::unique_lock lock(mutex_);
  if (plans_.count(info.name) != 0) return;  // as loadDirectory does for decoded plans: the first one stays
  auto entry = std::make_shared<RegisteredPlan>(std::move(info), std::move(path), ++sequence_);
  plans_[entry->info.name] = entry;
  invalidateLocked();
}

bool PlanRegistry::remove(const std::string& name) {
  std::unique_lock lock(mutex_);
  const bool removed = plans_.erase(name) != 0;
  if (removed) invalidateLocked();
  return removed;
}

void PlanRegistry::clear(std::optional<PlanSource> source) {
  std::unique_lock lock(mutex_);
  std::erase_if(plans_, [&](const auto& item) { return !source || item.second->info.source == *source; });
  invalidateLocked();
}

PlanEntry PlanRegistry::find(const std::string& name) const {
  std::shared_lock lock(mutex_);
  auto it = plans_.find(name);
  return it == plans_.end() ? nullptr : it->second;
}

std::vector<PlanEntry> PlanRegistry::list() const {
  std::vector<PlanEntry> out;
  {
    std::shared_lock lock(mutex_);
    for (const auto& item : plans_) out.push_back(item.second);
  }
  std::sort(out.begin(), out.end(), [](const PlanEntry& a, const PlanEntry& b) { return rankedBefore(*a, *b); });
  return out;
}

void PlanRegistry::setSelector(Selector selector) {
  std::unique_lock lock(mutex_);
  selector_ = std::move(selector);
  invalidateLocked();
}

void PlanRegistry::invalidateLocked() {
  cache_.clear();
  ++generation_;
}

PlanRegistry::CacheKey PlanRegistry::keyOf(const SelectionRequest& r) {
  return CacheKey{r.collective, r.messageBytes, r.dataType, r.worldSize, r.ranksPerNode, r.inplace,
                  r.capturing,  r.root ? int64_t(*r.root) : -1,      r.op,       r.tags,         r.placement};
}

size_t PlanRegistry::CacheKeyHash::operator()(const CacheKey& k) const {
  size_t h = std::hash<uint64_t>{}(k.messageBytes);
  auto mix = [&h](uint64_t v) { h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(uint64_t(k.collective) | uint64_t(k.dataType) << 8 | uint64_t(k.inplace) << 16 | uint64_t(k.capturing) << 17);
  mix(uint64_t(k.worldSize) << 32 | k.ranksPerNode);
  mix(uint64_t(k.root));
  mix(uint64_t(k.op));
  mix(uint64_t(k.placement.ranksSharingGpu) << 32 | k.placement.residentBlocks);
  for (const std::string& tag : k.tags) mix(std::hash<std::string>{}(tag));
  return h;
}

std::vector<PlanEntry> PlanRegistry::candidatesLocked(const SelectionRequest& request) const {
  std::vector<PlanEntry> out;
  for (const auto& item : plans_) {
    if (planFits(item.second->info, request)) out.push_back(item.second);
  }
  std::sort(out.begin(), out.end(), [](const PlanEntry& a, const PlanEntry& b) { return rankedBefore(*a, *b); });
  return out;
}

std::vector<PlanEntry> PlanRegistry::candidates(const SelectionRequest& request) const {
  std::shared_lock lock(mutex_);
  return candidatesLocked(request);
}

std::vector<PlanEntry> PlanRegistry::passedOver(const SelectionRequest& request) const {
  SelectionRequest anywhere = request;
  anywhere.placement = Placement{};
  std::vector<PlanEntry> out = candidates(anywhere);
  std::erase_if(out, [&](const PlanEntry& entry) { return fitsPlacement(entry->info, request.placement); });
  return out;
}

std::shared_ptr<const Plan> PlanRegistry::select(const SelectionRequest& request) {
  selections_.fetch_add(1, std::memory_order_relaxed);
  const CacheKey key = keyOf(request);
  SelectionRequest full;  // filled only on a miss: the hot path is the lookup alone
  Selector selector;
  uint64_t generation = 0;
  {
    std::shared_lock lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      cacheHits_.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
    full = request;
    full.candidates = candidatesLocked(request);
    selector = selector_;
    generation = generation_;
  }
  // The selector runs without the lock: it may look at the registry itself.
  std::shared_ptr<const Plan> chosen;
  if (selector) {
    selectorCalls_.fetch_add(1, std::memory_order_relaxed);
    chosen = selector(full);
  } else {
    chosen = firstThatLoads(full.candidates);
  }
  std::unique_lock lock(mutex_);
  if (generation == generation_) {
    if (cache_.size() >= kMaxCachedSelections) cache_.clear();
    cache_.emplace(key, chosen);
  }
  return chosen;
}

std::shared_ptr<const Plan> PlanRegistry::firstThatLoads(const std::vector<PlanEntry>& candidates) {
  for (const PlanEntry& entry : candidates) {
    try {
      return entry->plan();
    } catch (const std::exception& e) {
      // As a file that fails when its folder is loaded: reported, left out, and the job goes on.
      std::fprintf(stderr, "loom: skipped %s plan %s\n", std::string(planSourceName(entry->info.source)).c_str(),
                   e.what());
      std::unique_lock lock(mutex_);
      if (auto it = plans_.find(entry->info.name); it != plans_.end() && it->second == entry) {
        plans_.erase(it);
        invalidateLocked();
      }
    }
  }
  return nullptr;
}

std::shared_ptr<const Plan> PlanRegistry::selectOrThrow(const SelectionRequest& request) {
  if (auto plan = select(request)) return plan;
  std::ostringstream out;
  out << "no plan for " << describe(request) << ".";
  for (const PlanEntry& entry : passedOver(request)) {
    out << " Passed over '" << entry->info.name << "': " << placementShortfall(entry->info, request.placement) << ".";
  }
  out << " Registered for " << collectiveName(request.collective) << " over " << request.worldSize << " ranks:";
  bool any = false;
  for (const PlanEntry& entry : list()) {
    const PlanInfo& info = entry->info;
    if (info.collective != request.collective || info.worldSize != request.worldSize) continue;
    out << "\n  " << info.name << " (" << planSourceName(info.source) << "): " << info.ranksPerNode
        << " per node, bytes " << info.minMessageBytes << ".." << info.maxMessageBytes << ", "
        << (info.inplace ? "in place" : "out of place");
    if (info.root) out << ", root " << *info.root;
    if (info.reduceOp) out << ", " << reduceOpName(*info.reduceOp);
    any = true;
  }
  if (!any && !defaultPlansEnabled()) out << " none (bundled plans are off: LOOM_DEFAULT_PLANS=0)";
  if (!any && defaultPlansEnabled()) {
    out << " none (is `loom install-plans` done? bundled plans load from " << defaultPlansDirectory() << ")";
  }
  throw invalid(out.str());
}

std::vector<std::string> PlanRegistry::loadDirectory(const std::string& directory, PlanSource source) {
  std::vector<std::string> skipped;
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) return skipped;
  std::vector<std::filesystem::path> files;
  for (const auto& item : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = item.path().filename().string();
    if (name.ends_with(".json") || name.ends_with(".json.gz")) files.push_back(item.path());
  }
  std::sort(files.begin(), files.end());  // a stable registration order, so ties break the same way everywhere
  std::unordered_map<std::string, PlanIndexEntry> indexed;
  const std::filesystem::path indexPath = std::filesystem::path(directory) / kPlanIndexName;
  if (std::filesystem::exists(indexPath, error)) {
    try {
      for (PlanIndexEntry& entry : readPlanIndex(indexPath.string())) indexed.emplace(entry.file, std::move(entry));
    } catch (const std::exception& e) {
      skipped.push_back(e.what() + std::string(" (its plans are decoded now instead)"));
    }
  }
  for (const auto& path : files) {
    std::error_code sizeError;
    if (auto it = indexed.find(path.filename().string());
        it != indexed.end() && std::filesystem::file_size(path, sizeError) == it->second.fileBytes && !sizeError) {
      PlanInfo info = it->second.info;
      info.source = source;
      addDeferred(std::move(info), path.string());
      continue;
    }
    // Only what the installer wrote is a bundled plan: a file its index does not list (planted, or left by
    // hand) is not registered from the folder of bundled plans.
    const auto listed = indexed.find(path.filename().string());
    if (source == PlanSource::kBundled && !indexed.empty() && listed == indexed.end()) {
      skipped.push_back(path.string() + ": not a plan the installer wrote (the folder's .index does not list it)");
      continue;
    }
    try {
      auto plan = std::make_shared<const Plan>(Plan::load(path.string()));
      if (listed != indexed.end() && source == PlanSource::kBundled &&
          plan->contentHash != listed->second.info.contentHash) {
        throw Error(ErrorCategory::kInvalidPlan,
                    "its text is not what the installer wrote (a file changed since; `loom install-plans --force` "
                    "reinstalls the bundled plans)");
      }
      if (find(plan->name)) continue;
      add(plan, planInfoFrom(*plan, source));
    } catch (const std::exception& e) {
      skipped.push_back(path.string() + ": " + e.what());
    }
  }
  return skipped;
}

std::vector<std::string> PlanRegistry::ensureDefaultPlansLoaded() {
  // An empty directory stands for "bundled plans off" (LOOM_DEFAULT_PLANS=0): nothing is loaded.
  const std::string directory = defaultPlansEnabled() ? defaultPlansDirectory() : std::string();
  std::lock_guard lock(defaultPlansMutex_);
  if (!defaultPlansFrom_ || *defaultPlansFrom_ != directory) {
    // The cache root changed (LOOM_CACHE_DIR): the bundled plans are those of the new root.
    if (defaultPlansFrom_) clear(PlanSource::kBundled);
    defaultPlansSkipped_ = directory.empty() ? std::vector<std::string>{} : loadDirectory(directory, PlanSource::kBundled);
    // A damaged cache file must not stop the job, but it must not pass unnoticed either.
    for (const std::string& line : defaultPlansSkipped_) {
      std::fprintf(stderr, "loom: skipped bundled plan %s\n", line.c_str());
    }
    defaultPlansFrom_ = directory;
  }
  return defaultPlansSkipped_;
}

std::vector<std::string> PlanRegistry::loadTunedTable(const std::string& path) {
  std::vector<std::string> skipped;
  const TunedTable table = readTunedTable(path);
  const std::filesystem::path folder = std::filesystem::path(path).replace_extension("");
  for (const TunedRow& row : table.rows) {
    const std::filesystem::path file = folder / row.planFile;
    try {
      std::error_code error;
      if (std::filesystem::symlink_status(file, error).type() != std::filesystem::file_type::regular) {
        throw Error(ErrorCategory::kSystem, "not a regular file");
      }
      auto plan = std::make_shared<const Plan>(Plan::load(file.string()));
      PlanInfo info = planInfoFrom(*plan, PlanSource::kTuned);
      if (collectiveName(info.collective) != row.collective) {
        throw Error(ErrorCategory::kInvalidPlan, "a " + std::string(collectiveName(info.collective)) +
                                                     " plan in the row of " + row.collective);
      }
      // The row's range within the plan's own (a table whose rows outgrew their plans keeps what holds).
      info.minMessageBytes = std::max(row.minBytes, plan->minMessageBytes);
      info.maxMessageBytes = std::min(row.maxBytes, plan->maxMessageBytes);
      if (info.minMessageBytes > info.maxMessageBytes) {
        throw Error(ErrorCategory::kInvalidPlan, "its size range does not meet the row's");
      }
      add(plan, std::move(info), /*replace=*/true);
    } catch (const std::exception& e) {
      skipped.push_back(file.string() + ": " + e.what());
    }
  }
  return skipped;
}

std::vector<std::string> PlanRegistry::ensureTunedTableLoaded(const TunedMachine& machine) {
  if (!tunedTablesEnabled()) return {};
  const std::string path = findTunedTable(tunedDirectory(), machine);
  if (path.empty()) return {};
  std::lock_guard lock(defaultPlansMutex_);
  if (!tunedTablesLoaded_.insert(path).second) return {};
  std::vector<std::string> skipped;
  try {
    skipped = loadTunedTable(path);
  } catch (const std::exception& e) {
    skipped.push_back(e.what());
  }
  for (const std::string& line : skipped) std::fprintf(stderr, "loom: skipped tuned plan %s\n", line.c_str());
  return skipped;
}

RegistryStats PlanRegistry::stats() const {
  return RegistryStats{selections_.load(), cacheHits_.load(), selectorCalls_.load()};
}

}  // namespace loom
