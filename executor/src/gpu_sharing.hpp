#pragma once

// Ranks sharing one GPU: a testing mode, off unless LOOM_SHARE_GPU=1, in which several ranks of one
// process (threads, as loom.runtime.host_ranks runs them), each with its own stream, scratch, channels and
// proxy, run on one GPU, so plans of 4 and 8 ranks run on a machine with one. Their numbers are
// kernel costs on one GPU, not NVLink's. The interpreter blocks of those ranks wait for one another,
// so they must all be resident at once; nothing in CUDA guarantees that, so a call checks it.

#include <cstdint>
#include <vector>

#include "loom/communicator.hpp"
#include "loom/plan.hpp"

namespace loom {

// Whether LOOM_SHARE_GPU=1 is set: ranks of this process may share a GPU, in any communicator.
bool gpuSharingEnabled();

// The ranks sharing this rank's GPU (see Communicator::ranksSharingGpu); throws, naming them, when
// there are several and LOOM_SHARE_GPU is not on, or when they are not all threads of this process
// (kernels of different processes take turns on a GPU rather than running at once).
std::vector<int> checkGpuSharing(const Communicator& communicator);

// Throws when the blocks of `plan` over `sharers` (threadsPerBlock each; this rank alone when it has
// its GPU to itself) outnumber `residentLimit`, the blocks of that size the GPU holds at once: they
// would wait for one another forever.
void checkResidency(const Plan& plan, const std::vector<int>& sharers, uint32_t residentLimit,
                    const Communicator& communicator);

}  // namespace loom
