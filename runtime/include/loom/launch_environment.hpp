#pragma once

// Where a process finds its rank, the world size and the bootstrap root when a launcher started it.
//
//   launcher      rank / world size                     local rank / local world size
//   loom.launch   RANK, WORLD_SIZE (+ LOOM_LAUNCHER)    LOCAL_RANK, LOCAL_WORLD_SIZE
//   torchrun      RANK, WORLD_SIZE                      LOCAL_RANK, LOCAL_WORLD_SIZE
//   Open MPI      OMPI_COMM_WORLD_RANK, _SIZE           OMPI_COMM_WORLD_LOCAL_RANK, _LOCAL_SIZE
//   Slurm (srun)  SLURM_PROCID, SLURM_NTASKS            SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//
// The root's address is LOOM_BOOTSTRAP_ADDR (host:port), else MASTER_ADDR with MASTER_PORT + 1
// (PyTorch's own store holds MASTER_PORT on rank 0). The secret is LOOM_BOOTSTRAP_SECRET (32 hex
// digits). Without it, the secret is derived from the job's identity (Slurm job and step id, Open
// MPI job id, torchrun run id) and the address: that keeps concurrent jobs apart but is no
// secret, since other users can read those values; LOOM_BOOTSTRAP_REQUIRE_SECRET=1 refuses to run
// without LOOM_BOOTSTRAP_SECRET. loom.launch always sets it. docs/runtime.md has the details.

#include <functional>
#include <optional>
#include <string>

#include "loom/unique_id.hpp"

namespace loom {

struct LaunchEnvironment {
  std::string launcher;  // "loom.launch", "torchrun", "Open MPI" or "Slurm"
  int rank = 0;
  int worldSize = 1;
  std::optional<int> localRank;
  std::optional<int> localWorldSize;
  std::string addressSource;           // "LOOM_BOOTSTRAP_ADDR" or "MASTER_ADDR/MASTER_PORT"
  bool secretFromEnvironment = false;  // false: derived from the job's identity, see above
  std::optional<int> listenFd;         // LOOM_BOOTSTRAP_LISTEN_FD: rank 0's listening socket from loom.launch
  UniqueId uniqueId;
};

// Looks a variable up; nullopt when it is unset or empty.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;

// InvalidArgument errors name the variable that is missing or malformed.
LaunchEnvironment detectLaunchEnvironment();
LaunchEnvironment detectLaunchEnvironment(const EnvironmentLookup& lookup);

}  // namespace loom
