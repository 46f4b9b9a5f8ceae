#include "gpu_sharing.hpp"

#include <optional>
#include <string>

#include "environment.hpp"
#include "loom/error.hpp"
#include "loom/rank_list.hpp"
#include "module_loading.hpp"

namespace loom {

bool gpuSharingEnabled() {
  const std::optional<std::string> enabled = processEnvironment("LOOM_SHARE_GPU");
  return enabled && parseBoolean(*enabled, "LOOM_SHARE_GPU");
}

std::vector<int> checkGpuSharing(const Communicator& communicator) {
  std::vector<int> sharers = communicator.ranksSharingGpu();
  if (sharers.size() <= 1) return sharers;
  const std::string who =
      "device: " + rankList(sharers) + " use GPU " + communicator.cudaDeviceBusId() + " of one host";
  if (!gpuSharingEnabled()) {
    throw Error(ErrorCategory::kInvalidArgument,
                who + " (ranks " + std::to_string(sharers[0]) + " and " + std::to_string(sharers[1]) +
                    " both use GPU " + communicator.cudaDeviceBusId() +
                    "); give each rank its own GPU (torch.cuda.set_device(local_rank) before creating the "
                    "communicator, or device=local_rank). For testing only, ranks that are threads of one "
                    "process may share a GPU with LOOM_SHARE_GPU=1");
  }
  // 16 ranks (the 2x8 plans) is the most tested on one GPU (docs/testing.md).
  constexpr size_t kMostRanksSharing = 16;
  if (sharers.size() > kMostRanksSharing) {
    throw Error(ErrorCategory::kInvalidArgument,
                who + ": at most " + std::to_string(kMostRanksSharing) + " ranks may share one GPU (there are " +
                    std::to_string(sharers.size()) +
                    "), the most that has been tested. Run plans of more ranks on the CPU backend "
                    "(loom.runtime.host_ranks)");
  }
  // Each rank's stream needs a hardware queue of its own: kernels of streams that share one start in
  // order, so a kernel that waits for another rank's next call would hold that call back (CUDA's
  // default is 8 queues; 32 is its most).
  const std::optional<std::string> queues = processEnvironment("CUDA_DEVICE_MAX_CONNECTIONS");
  if (!queues || parseInteger(*queues, 1, 1 << 20, "CUDA_DEVICE_MAX_CONNECTIONS") < 32) {
    throw Error(ErrorCategory::kInvalidArgument,
                who +
                    ": ranks sharing a GPU need CUDA_DEVICE_MAX_CONNECTIONS=32 in the environment before CUDA "
                    "starts (it is " +
                    (queues ? *queues : std::string("unset")) +
                    "), so that each rank's stream has a hardware queue of its own; kernels of streams that "
                    "share a queue start in order and would wait for each other");
  }
  // With lazy loading (CUDA's default since 12.2) the first use of a kernel loads its module, and a
  // load may wait for the kernels running on the GPU: a rank's first launch of a kernel (Loom's for a
  // new type, or any of the program's own) would wait for other ranks' blocks that wait for this rank.
  requireEagerModuleLoading(who + ": ranks sharing a GPU need",
                            "with lazy loading, the first launch of a kernel may wait for the kernels running on the "
                            "GPU, and those wait for this rank's next call");
  for (int rank : sharers) {
    if (!communicator.sameProcess(rank)) {
      throw Error(ErrorCategory::kInvalidArgument,
                  who + ", but rank " + std::to_string(rank) + " runs in another process than rank " +
                      std::to_string(communicator.rank()) +
                      ": ranks sharing a GPU (LOOM_SHARE_GPU=1) must be threads of one process, whose kernels "
                      "run at once (those of several processes take turns and would wait for each other)");
    }
  }
  return sharers;
}

void checkResidency(const Plan& plan, const std::vector<int>& sharers, uint32_t residentLimit,
                    const Communicator& communicator) {
  uint64_t blocks = 0;
  for (int rank : sharers) blocks += plan.gpu(uint32_t(rank)).threadblocks.size();
  if (blocks <= residentLimit) return;
  const std::string who =
      sharers.size() > 1 ? "the " + std::to_string(sharers.size()) + " ranks sharing GPU " +
                               communicator.cudaDeviceBusId() + " (" + rankList(sharers) + ")"
                         : "rank " + std::to_string(communicator.rank()) + " on GPU " + communicator.cudaDeviceBusId();
  throw Error(ErrorCategory::kInvalidArgument,
              "plan '" + plan.name + "': " + who + " would run " + std::to_string(blocks) + " thread blocks of " +
                  std::to_string(plan.threadsPerBlock) + " threads at once, but the GPU holds at most " +
                  std::to_string(residentLimit) +
                  " such blocks (one per multiprocessor, one multiprocessor left free for other kernels: CUDA's "
                  "copies and the program's own); they wait for one another, so the call would hang. Use a plan "
                  "with fewer thread blocks" +
                  (sharers.size() > 1 ? ", or fewer ranks on the GPU" : ""));
}

}  // namespace loom
