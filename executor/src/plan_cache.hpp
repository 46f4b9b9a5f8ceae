#pragma once

// What an executor keeps per plan: the plan's resources and its call contexts, keyed by what a call
// must match to reuse one, least recently used last, and the bounds of both caches.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "call_agreement.hpp"
#include "call_context.hpp"
#include "loom/data_type.hpp"
#include "loom/plan.hpp"
#include "plan_resources.hpp"

namespace loom {

// Bounds of the caches: plans per executor, contexts (size x buffers) per plan. Evicting is a
// collective step like building (every rank runs the same calls, so every rank evicts alike). A
// context captured in a CUDA graph is never evicted, nor its plan: the graph may replay it at any time
// (every rank captures the same calls, so the ranks still evict alike); the caches grow past their
// bounds rather than drop one.
constexpr size_t kMaxPlans = 32;
constexpr size_t kMaxContextsPerPlan = 64;

// A context's buffers: every rank's addresses and the allocations behind them (an address alone may
// come back for a new allocation after a free, and peers would still write into their mapping of the
// old one), as the per-call agreement reports them, so that every rank keys its contexts alike and a
// rank never reuses a context that its peers built for other buffers. Where the context can shift
// peers' buffers (CachedPlan::shiftable) the addresses are left out: one context per allocations; for
// buffers in symmetric windows only the windows are kept: one context per pair of windows.
// The data type and operator are part of it so that a new pair is a setup step, where the ranks
// check that they agree on the call (call_agreement.hpp).
struct ContextKey {
  uint64_t messageBytes;
  DataType type;
  ReduceOp op;
  std::vector<RankBuffers> ranks;  // empty for plans that reach only peers' scratch
  bool operator==(const ContextKey&) const = default;
};
struct ContextKeyHash {
  size_t operator()(const ContextKey& k) const {
    size_t hash = std::hash<uint64_t>{}(k.messageBytes) ^ (size_t(k.type) << 8 | size_t(k.op)) * 1009;
    for (const RankBuffers& r : k.ranks) {
      hash = hash * 31 ^ std::hash<uint64_t>{}(r.input) ^ std::hash<uint64_t>{}(r.output) * 131 ^
             std::hash<uint64_t>{}(r.inputAllocation) * 7 ^ std::hash<uint64_t>{}(r.outputAllocation) * 17 ^
             std::hash<uint64_t>{}(r.inputBytes) * 23 ^ std::hash<uint64_t>{}(r.outputBytes) * 29 ^
             std::hash<uint64_t>{}(r.inputWindow) * 37 ^ std::hash<uint64_t>{}(r.outputWindow) * 41;
    }
    return hash;
  }
};

// A plan's resources and its contexts, least recently used last.
struct CachedPlan {
  std::unique_ptr<PlanResources> resources;
  // A copy of the plan, for errors explained after the call (a trap that comm.error() reports when the
  // caller's plan object may be gone): the ops, their DSL lines and the peers' programs.
  std::shared_ptr<const Plan> plan;
  bool bindsUserBuffers = true;
  // Memory channels only (a peer maps the whole allocation behind a registration; a port channel's
  // proxy knows only the registered range), and few enough peers for Program::peerShifts.
  bool shiftable = false;
  std::optional<ReduceOp> reduceOp;  // the operator of its reductions; none when it has none
  std::list<ContextKey> order;
  std::unordered_map<ContextKey, std::pair<std::unique_ptr<CallContext>, std::list<ContextKey>::iterator>,
                     ContextKeyHash>
      contexts;
};

// Drops the least recently used contexts of `cached` that `which` selects, at most `limit` of them;
// returns how many.
inline size_t dropContexts(CachedPlan& cached, const std::function<bool(const CallContext&)>& which,
                           size_t limit = SIZE_MAX) {
  size_t dropped = 0;
  for (auto it = cached.order.end(); it != cached.order.begin() && dropped < limit;) {
    --it;
    auto found = cached.contexts.find(*it);
    if (found != cached.contexts.end() && which(*found->second.first)) {
      cached.contexts.erase(found);
      it = cached.order.erase(it);
      ++dropped;
    }
  }
  return dropped;
}

// Whether a CUDA graph holds one of its contexts (then the plan stays cached).
inline bool hasCaptured(const CachedPlan& cached) {
  return std::any_of(cached.contexts.begin(), cached.contexts.end(),
                     [](const auto& entry) { return entry.second.first->captured(); });
}

}  // namespace loom
