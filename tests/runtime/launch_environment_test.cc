#include "loom/launch_environment.hpp"

#include <gtest/gtest.h>

#include <map>

#include "loom/error.hpp"

namespace loom {
namespace {

using Env = std::map<std::string, std::string>;

LaunchEnvironment detect(const Env& env) {
  return detectLaunchEnvironment([&](const std::string& name) -> std::optional<std::string> {
    auto found = env.find(name);
    if (found == env.end() || found->second.empty()) return std::nullopt;
    return found->second;
  });
}

void expectInvalid(const Env& env, const std::string& fragment) {
  try {
    detect(env);
    FAIL() << "no error; expected one containing '" << fragment << "'";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

const std::string kSecret = "0123456789abcdef0123456789abcdef";

TEST(LaunchEnvironmentTest, LoomLauncher) {
  LaunchEnvironment env = detect({{"RANK", "2"},
                                  {"WORLD_SIZE", "4"},
                                  {"LOCAL_RANK", "2"},
                                  {"LOCAL_WORLD_SIZE", "4"},
                                  {"LOOM_LAUNCHER", "loom"},
                                  {"LOOM_BOOTSTRAP_ADDR", "127.0.0.1:40000"},
                                  {"LOOM_BOOTSTRAP_SECRET", kSecret}});
  EXPECT_EQ(env.launcher, "loom.launch");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.worldSize, 4);
  EXPECT_EQ(env.localRank, 2);
  EXPECT_EQ(env.localWorldSize, 4);
  EXPECT_EQ(env.uniqueId.address(), "127.0.0.1:40000");
  EXPECT_EQ(env.uniqueId.secret(), UniqueId::parseSecret(kSecret, "test"));
  EXPECT_TRUE(env.secretFromEnvironment);
  EXPECT_EQ(env.addressSource, "LOOM_BOOTSTRAP_ADDR");
  EXPECT_FALSE(env.listenFd.has_value());
}

TEST(LaunchEnvironmentTest, LoomLauncherWithoutSecretIsAnError) {
  expectInvalid({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOOM_LAUNCHER", "loom"}, {"LOOM_BOOTSTRAP_ADDR", "127.0.0.1:1"}},
                "LOOM_BOOTSTRAP_SECRET is not set, but loom.launch always sets it");
}

TEST(LaunchEnvironmentTest, TorchrunUsesMasterPortPlusOne) {
  Env vars = {{"RANK", "1"},
              {"WORLD_SIZE", "8"},
              {"LOCAL_RANK", "1"},
              {"LOCAL_WORLD_SIZE", "8"},
              {"MASTER_ADDR", "127.0.0.1"},
              {"MASTER_PORT", "29500"},
              {"TORCHELASTIC_RUN_ID", "run-a"}};
  LaunchEnvironment env = detect(vars);
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.uniqueId.address(), "127.0.0.1:29501");
  EXPECT_EQ(env.addressSource, "MASTER_ADDR/MASTER_PORT");
  EXPECT_FALSE(env.secretFromEnvironment);
  // Derived: the same on every rank of the job, different for another run.
  Env rank0 = vars;
  rank0["RANK"] = "0";
  rank0["LOCAL_RANK"] = "0";
  EXPECT_EQ(detect(rank0).uniqueId, env.uniqueId);
  Env otherRun = vars;
  otherRun["TORCHELASTIC_RUN_ID"] = "run-b";
  EXPECT_NE(detect(otherRun).uniqueId.secret(), env.uniqueId.secret());
  // LOOM_BOOTSTRAP_ADDR wins over MASTER_*.
  vars["LOOM_BOOTSTRAP_ADDR"] = "127.0.0.1:41000";
  EXPECT_EQ(detect(vars).uniqueId.address(), "127.0.0.1:41000");
}

TEST(LaunchEnvironmentTest, Ipv6MasterAddress) {
  LaunchEnvironment env =
      detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "::1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(env.uniqueId.address(), "[::1]:29501");
}

TEST(LaunchEnvironmentTest, OpenMpi) {
  Env vars = {{"OMPI_COMM_WORLD_RANK", "3"},
              {"OMPI_COMM_WORLD_SIZE", "16"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"},
              {"LOOM_BOOTSTRAP_ADDR", "127.0.0.1:5000"},
              {"PMIX_NAMESPACE", "prterun-node1-1234@1"}};
  LaunchEnvironment env = detect(vars);
  EXPECT_EQ(env.launcher, "Open MPI");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.worldSize, 16);
  EXPECT_EQ(env.localRank, 3);
  EXPECT_EQ(env.localWorldSize, 8);
  EXPECT_FALSE(env.secretFromEnvironment);
  Env otherJob = vars;
  otherJob["PMIX_NAMESPACE"] = "prterun-node1-1235@1";
  EXPECT_NE(detect(otherJob).uniqueId.secret(), env.uniqueId.secret());
  vars["LOOM_BOOTSTRAP_SECRET"] = kSecret;
  EXPECT_TRUE(detect(vars).secretFromEnvironment);
  EXPECT_EQ(detect(vars).uniqueId.secret(), UniqueId::parseSecret(kSecret, "test"));
}

TEST(LaunchEnvironmentTest, Slurm) {
  Env vars = {{"SLURM_PROCID", "5"},        {"SLURM_NTASKS", "8"},
              {"SLURM_LOCALID", "1"},       {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
              {"SLURM_JOB_ID", "777"},      {"SLURM_STEP_ID", "0"},
              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "6000"}};
  LaunchEnvironment env = detect(vars);
  EXPECT_EQ(env.launcher, "Slurm");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.worldSize, 8);
  EXPECT_EQ(env.localRank, 1);
  EXPECT_EQ(env.localWorldSize, 4);
  EXPECT_EQ(env.uniqueId.address(), "127.0.0.1:6001");
  Env nextStep = vars;
  nextStep["SLURM_STEP_ID"] = "1";
  EXPECT_NE(detect(nextStep).uniqueId.secret(), env.uniqueId.secret());
  vars["SLURM_STEP_TASKS_PER_NODE"] = "4,3,1";
  EXPECT_FALSE(detect(vars).localWorldSize.has_value());
  vars["SLURM_NTASKS_PER_NODE"] = "4";
  EXPECT_EQ(detect(vars).localWorldSize, 4);
}

TEST(LaunchEnvironmentTest, TorchrunVariablesWinOverSchedulerOnes) {
  // torchrun inside a Slurm allocation: RANK is the process's rank, not SLURM_PROCID.
  LaunchEnvironment env = detect({{"RANK", "6"},
                                  {"WORLD_SIZE", "8"},
                                  {"SLURM_PROCID", "0"},
                                  {"SLURM_NTASKS", "1"},
                                  {"LOOM_BOOTSTRAP_ADDR", "127.0.0.1:5000"}});
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.rank, 6);
}

TEST(LaunchEnvironmentTest, ErrorsNameTheVariable) {
  expectInvalid({}, "no launcher environment");
  expectInvalid({{"RANK", "0"}}, "WORLD_SIZE is not set (torchrun)");
  expectInvalid({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"LOOM_BOOTSTRAP_ADDR", "h:1"}}, "RANK: expected an integer");
  expectInvalid({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK: expected an integer from 0");
  expectInvalid({{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK=2 is not below WORLD_SIZE=2");
  expectInvalid({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE: expected an integer from 1");
  expectInvalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}},
                "LOCAL_RANK=3 is not below the local world size 2");
  expectInvalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "set LOOM_BOOTSTRAP_ADDR=host:port");
  expectInvalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "65535"}},
                "MASTER_PORT: expected an integer from 1 to 65534");
  expectInvalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOOM_BOOTSTRAP_ADDR", "nowhere"}},
                "LOOM_BOOTSTRAP_ADDR: expected HOST:PORT");
  expectInvalid(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOOM_BOOTSTRAP_ADDR", "127.0.0.1:1"}, {"LOOM_BOOTSTRAP_SECRET", "xyz"}},
      "LOOM_BOOTSTRAP_SECRET: expected 32 hex digits");
  expectInvalid({{"OMPI_COMM_WORLD_RANK", "0"},
                 {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"LOOM_BOOTSTRAP_ADDR", "127.0.0.1:1"},
                 {"LOOM_BOOTSTRAP_REQUIRE_SECRET", "1"}},
                "LOOM_BOOTSTRAP_REQUIRE_SECRET is on");
  expectInvalid({{"OMPI_COMM_WORLD_RANK", "0"},
                 {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"LOOM_BOOTSTRAP_ADDR", "127.0.0.1:1"},
                 {"LOOM_BOOTSTRAP_REQUIRE_SECRET", "maybe"}},
                "LOOM_BOOTSTRAP_REQUIRE_SECRET: expected 1/0");
  expectInvalid({{"RANK", "0"},
                 {"WORLD_SIZE", "2"},
                 {"LOOM_BOOTSTRAP_ADDR", "127.0.0.1:1"},
                 {"LOOM_BOOTSTRAP_SECRET", kSecret},
                 {"LOOM_BOOTSTRAP_LISTEN_FD", "-3"}},
                "LOOM_BOOTSTRAP_LISTEN_FD");
  // Not required: an off switch is honoured.
  EXPECT_FALSE(detect({{"SLURM_PROCID", "0"},
                       {"SLURM_NTASKS", "2"},
                       {"LOOM_BOOTSTRAP_ADDR", "127.0.0.1:1"},
                       {"LOOM_BOOTSTRAP_REQUIRE_SECRET", "off"}})
                   .secretFromEnvironment);
}

}  // namespace
}  // namespace loom
