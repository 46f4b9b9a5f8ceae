#include "loom/launch_environment.hpp"

#include <climits>
#include <cstring>

#include "environment.hpp"
#include "loom/bootstrap.hpp"
#include "loom/error.hpp"
#include "socket.hpp"

namespace loom {
namespace {

struct LauncherVariables {
  const char* launcher;
  const char* rank;
  const char* worldSize;
  const char* localRank;
  const char* localWorldSize;
};

constexpr LauncherVariables kTorchrun{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr LauncherVariables kOpenMpi{"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr LauncherVariables kSlurm{"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};

// 64-bit FNV-1a, finished with the splitmix64 mixer. Not cryptographic: the derived secret only
// has to differ between jobs, and nothing about it is secret anyway.
uint64_t hash64(const std::string& text, uint64_t seed) {
  uint64_t hash = 0xcbf29ce484222325ull ^ seed;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  hash += 0x9e3779b97f4a7c15ull;
  hash = (hash ^ (hash >> 30)) * 0xbf58476d1ce4e5b9ull;
  hash = (hash ^ (hash >> 27)) * 0x94d049bb133111ebull;
  return hash ^ (hash >> 31);
}

UniqueId::Secret deriveSecret(const std::string& identity) {
  UniqueId::Secret secret{};
  uint64_t halves[2] = {hash64(identity, 0x6c6f6f6d2d6b6579ull), hash64(identity, 0x626f6f7473747270ull)};
  std::memcpy(secret.data(), halves, sizeof(halves));
  return secret;
}

// What tells this job apart from another one on the same hosts, per launcher.
std::string jobIdentity(const std::string& launcher, const EnvironmentLookup& env) {
  auto value = [&](const char* name) { return env(name).value_or(""); };
  if (launcher == "Slurm") return "slurm:" + value("SLURM_JOB_ID") + "." + value("SLURM_STEP_ID");
  if (launcher == "Open MPI") {
    for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"}) {
      if (std::optional<std::string> id = env(name)) return std::string("ompi:") + name + "=" + *id;
    }
    return "ompi:";
  }
  return "torchrun:" + value("TORCHELASTIC_RUN_ID");
}

// SLURM_NTASKS_PER_NODE when given; else SLURM_STEP_TASKS_PER_NODE when every node runs as many
// tasks ("4" or "4(x2)"); else unknown.
std::optional<int> slurmLocalWorldSize(const EnvironmentLookup& env) {
  if (std::optional<std::string> perNode = env("SLURM_NTASKS_PER_NODE")) {
    return static_cast<int>(parseInteger(*perNode, 1, kMaxBootstrapWorldSize, "SLURM_NTASKS_PER_NODE"));
  }
  std::optional<std::string> step = env("SLURM_STEP_TASKS_PER_NODE");
  if (!step || step->find(',') != std::string::npos) return std::nullopt;
  std::string count = step->substr(0, step->find('('));
  return static_cast<int>(parseInteger(count, 1, kMaxBootstrapWorldSize, "SLURM_STEP_TASKS_PER_NODE"));
}

std::string joinHostPort(const std::string& host, int port) {
  bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

LaunchEnvironment detectLaunchEnvironment() {
  return detectLaunchEnvironment([](const std::string& name) { return processEnvironment(name.c_str()); });
}

LaunchEnvironment detectLaunchEnvironment(const EnvironmentLookup& env) {
  LauncherVariables vars{};
  std::string launcher;
  if (env("RANK") || env("WORLD_SIZE")) {
    vars = kTorchrun;
    launcher = env("LOOM_LAUNCHER") == std::optional<std::string>("loom") ? "loom.launch" : "torchrun";
  } else if (env("OMPI_COMM_WORLD_RANK") || env("OMPI_COMM_WORLD_SIZE")) {
    vars = kOpenMpi;
    launcher = vars.launcher;
  } else if (env("SLURM_PROCID")) {
    vars = kSlurm;
    launcher = vars.launcher;
  } else {
    throw Error(ErrorCategory::kInvalidArgument,
                "no launcher environment: set RANK and WORLD_SIZE (loom.launch, torchrun), or start the ranks with "
                "Open MPI (OMPI_COMM_WORLD_RANK) or Slurm's srun (SLURM_PROCID)");
  }
  auto required = [&](const char* name) {
    std::optional<std::string> value = env(name);
    if (!value) throw Error(ErrorCategory::kInvalidArgument, std::string(name) + " is not set (" + launcher + ")");
    return *value;
  };
  auto integer = [&](const char* name, const std::string& text, int64_t min) {
    return static_cast<int>(parseInteger(text, min, kMaxBootstrapWorldSize, name));
  };

  const char* worldSizeName = vars.worldSize;
  std::optional<std::string> worldSizeText = env(vars.worldSize);
  if (!worldSizeText && launcher == "Slurm" && env("SLURM_NPROCS")) {
    worldSizeName = "SLURM_NPROCS";
    worldSizeText = env(worldSizeName);
  }
  if (!worldSizeText) required(vars.worldSize);
  int worldSize = integer(worldSizeName, *worldSizeText, 1);
  int rank = integer(vars.rank, required(vars.rank), 0);
  if (rank >= worldSize) {
    throw Error(ErrorCategory::kInvalidArgument, std::string(vars.rank) + "=" + std::to_string(rank) +
                                                     " is not below " + worldSizeName + "=" +
                                                     std::to_string(worldSize));
  }
  std::optional<int> localRank;
  std::optional<int> localWorldSize;
  if (std::optional<std::string> text = env(vars.localRank)) localRank = integer(vars.localRank, *text, 0);
  if (launcher == "Slurm") {
    localWorldSize = slurmLocalWorldSize(env);
  } else if (std::optional<std::string> text = env(vars.localWorldSize)) {
    localWorldSize = integer(vars.localWorldSize, *text, 1);
  }
  if (localRank && localWorldSize && *localRank >= *localWorldSize) {
    throw Error(ErrorCategory::kInvalidArgument, std::string(vars.localRank) + "=" + std::to_string(*localRank) +
                                                     " is not below the local world size " +
                                                     std::to_string(*localWorldSize));
  }

  std::string address;
  std::string addressSource;
  if (std::optional<std::string> text = env("LOOM_BOOTSTRAP_ADDR")) {
    address = *text;
    addressSource = "LOOM_BOOTSTRAP_ADDR";
  } else if (env("MASTER_ADDR") && env("MASTER_PORT")) {
    int port = static_cast<int>(parseInteger(*env("MASTER_PORT"), 1, 65534, "MASTER_PORT"));
    address = joinHostPort(*env("MASTER_ADDR"), port + 1);
    addressSource = "MASTER_ADDR/MASTER_PORT";
  } else {
    throw Error(ErrorCategory::kInvalidArgument,
                "the bootstrap root is unknown (" + launcher +
                    "): set LOOM_BOOTSTRAP_ADDR=host:port (where rank 0 listens) on every rank, or MASTER_ADDR "
                    "and MASTER_PORT (Loom then uses MASTER_PORT + 1)");
  }

  UniqueId::Secret secret{};
  bool secretFromEnvironment = false;
  if (std::optional<std::string> text = env("LOOM_BOOTSTRAP_SECRET")) {
    secret = UniqueId::parseSecret(*text, "LOOM_BOOTSTRAP_SECRET");
    secretFromEnvironment = true;
  } else if (launcher == "loom.launch") {
    throw Error(ErrorCategory::kInvalidArgument, "LOOM_BOOTSTRAP_SECRET is not set, but loom.launch always sets it");
  } else {
    std::optional<std::string> require = env("LOOM_BOOTSTRAP_REQUIRE_SECRET");
    if (require && parseBoolean(*require, "LOOM_BOOTSTRAP_REQUIRE_SECRET")) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "LOOM_BOOTSTRAP_SECRET is not set and LOOM_BOOTSTRAP_REQUIRE_SECRET is on: export "
                  "LOOM_BOOTSTRAP_SECRET=<32 hex digits> (the same on every rank) before starting the job");
    }
    secret = deriveSecret(jobIdentity(launcher, env) + "|" + address);
  }

  std::optional<int> listenFd;
  if (std::optional<std::string> text = env("LOOM_BOOTSTRAP_LISTEN_FD")) {
    listenFd = static_cast<int>(parseInteger(*text, 0, INT_MAX, "LOOM_BOOTSTRAP_LISTEN_FD"));
  }

  net::SocketAddress::parse(address, addressSource);  // so that a bad address names its variable
  UniqueId id = UniqueId::fromAddress(address, secret);
  return LaunchEnvironment{.launcher = launcher,
                           .rank = rank,
                           .worldSize = worldSize,
                           .localRank = localRank,
                           .localWorldSize = localWorldSize,
                           .addressSource = addressSource,
                           .secretFromEnvironment = secretFromEnvironment,
                           .listenFd = listenFd,
                           .uniqueId = id};
}

}  // namespace loom
