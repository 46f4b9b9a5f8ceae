// What one selection costs on the hot path: a registry holding a realistic number of plans (every
// collective x world size x size range, user and bundled), then select() for a handful of request
// keys in turn, as a training step's calls repeat them. Prints ns per call, median of 7 runs.
//
//   build/tests/loom_selector_bench [plan.json]   (default: examples/plans/allreduce_2r_simple.json)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "loom/plan_registry.hpp"

using namespace loom;

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : std::string(LOOM_SOURCE_DIR) + "/examples/plans/allreduce_2r_simple.json";
  const Plan base = Plan::load(path);
  PlanRegistry registry;
  // 6 collectives x 3 world sizes x 8 size ranges x (user, bundled): 288 plans.
  const Collective collectives[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                                    Collective::kAllToAll,  Collective::kBroadcast, Collective::kSendRecv};
  for (Collective collective : collectives) {
    for (uint32_t world : {2u, 4u, 8u}) {
      for (int range = 0; range < 8; ++range) {
        for (PlanSource source : {PlanSource::kUser, PlanSource::kBundled}) {
          auto plan = std::make_shared<Plan>(base);
          plan->name = std::string(collectiveName(collective)) + "_" + std::to_string(world) + "_" +
                       std::to_string(range) + "_" + std::string(planSourceName(source));
          plan->minMessageBytes = uint64_t(1) << (4 * range);
          plan->maxMessageBytes = (uint64_t(1) << (4 * range + 4)) - 1;
          PlanInfo info = planInfoFrom(*plan, source);
          info.collective = collective;
          info.worldSize = world;
          info.ranksPerNode = world;
          info.root = collective == Collective::kBroadcast ? std::optional<uint32_t>(0) : std::nullopt;
          registry.add(plan, info);
        }
      }
    }
  }
  // The keys of a training step: a few sizes of all-reduce and all-gather.
  std::vector<SelectionRequest> requests;
  for (uint64_t bytes : {4096ull, 65536ull, 1ull << 20, 16ull << 20, 256ull << 20}) {
    for (Collective collective : {Collective::kAllReduce, Collective::kAllGather}) {
      SelectionRequest request;
      request.collective = collective;
      request.messageBytes = bytes;
      request.dataType = DataType::kBFloat16;
      request.worldSize = 8;
      request.ranksPerNode = 8;
      requests.push_back(request);
    }
  }
  constexpr int kCalls = 2'000'000;
  std::vector<double> runs;
  const void* sink = nullptr;
  for (int run = 0; run < 7; ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) sink = registry.select(requests[i % requests.size()]).get();
    const auto stop = std::chrono::steady_clock::now();
    runs.push_back(std::chrono::duration<double, std::nano>(stop - start).count() / kCalls);
  }
  std::sort(runs.begin(), runs.end());
  const RegistryStats stats = registry.stats();
  std::printf("plans %zu, request keys %zu, calls %d x 7: median %.1f ns per select (min %.1f, max %.1f); "
              "cache hits %llu of %llu%s\n",
              registry.list().size(), requests.size(), kCalls, runs[3], runs[0], runs[6],
              (unsigned long long)stats.cacheHits, (unsigned long long)stats.selections, sink ? "" : " (no plan!)");
  return runs[3] < 1000.0 ? 0 : 1;
}
