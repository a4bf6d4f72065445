// Identity: who a process is in its job, read from its launcher's environment.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "core/identity.hpp"
#include "trainshim/names.hpp"

namespace trainshim::shim {
namespace {

// Clears every variable identity_from_environment reads and restores them afterwards.
class IdentityTest : public ::testing::Test {
 protected:
  static constexpr const char* kVariables[] = {"RANK",
                                               "LOCAL_RANK",
                                               "WORLD_SIZE",
                                               "LOCAL_WORLD_SIZE",
                                               "SLURM_PROCID",
                                               "SLURM_LOCALID",
                                               "SLURM_NTASKS",
                                               "SLURM_NTASKS_PER_NODE",
                                               "OMPI_COMM_WORLD_RANK",
                                               "OMPI_COMM_WORLD_LOCAL_RANK",
                                               "OMPI_COMM_WORLD_SIZE",
                                               "OMPI_COMM_WORLD_LOCAL_SIZE",
                                               "PMI_RANK",
                                               "MPI_LOCALRANKID",
                                               "PMI_SIZE",
                                               "MPI_LOCALNRANKS",
                                               "TRAINSHIM_JOB",
                                               "TORCHELASTIC_RUN_ID",
                                               "SLURM_JOB_ID",
                                               "TORCHELASTIC_ERROR_FILE",
                                               "TRAINSHIM_LAUNCH"};

  void SetUp() override {
    for (const char* name : kVariables) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kVariables) {
      const auto it = saved_.find(name);
      if (it == saved_.end()) unsetenv(name);
      else setenv(name, it->second.c_str(), 1);
    }
  }
  static void set(const char* name, const char* value) { setenv(name, value, 1); }

 private:
  std::map<std::string, std::string> saved_;
};

TEST_F(IdentityTest, NoLauncher) {
  const Identity id = identity_from_environment();
  EXPECT_EQ(id.rank, -1);
  EXPECT_EQ(id.local_rank, -1);
  EXPECT_EQ(id.world_size, -1);
  EXPECT_EQ(id.local_world_size, -1);
}

TEST_F(IdentityTest, TorchrunWinsOverSlurm) {
  set("RANK", "3");
  set("LOCAL_RANK", "1");
  set("WORLD_SIZE", "8");
  set("LOCAL_WORLD_SIZE", "4");
  set("SLURM_PROCID", "5");
  set("SLURM_LOCALID", "2");
  set("SLURM_NTASKS", "16");
  set("SLURM_NTASKS_PER_NODE", "8");
  const Identity id = identity_from_environment();
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.world_size, 8);
  EXPECT_EQ(id.local_world_size, 4);
}

TEST_F(IdentityTest, SlurmWithoutRank) {
  set("SLURM_PROCID", "5");
  set("SLURM_LOCALID", "2");
  set("SLURM_NTASKS", "16");
  set("SLURM_NTASKS_PER_NODE", "8");
  set("OMPI_COMM_WORLD_RANK", "9");
  const Identity id = identity_from_environment();
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.local_rank, 2);
  EXPECT_EQ(id.world_size, 16);
  EXPECT_EQ(id.local_world_size, 8);
}

TEST_F(IdentityTest, OpenMpi) {
  set("OMPI_COMM_WORLD_RANK", "9");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "12");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "6");
  set("PMI_RANK", "4");
  const Identity id = identity_from_environment();
  EXPECT_EQ(id.rank, 9);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.world_size, 12);
  EXPECT_EQ(id.local_world_size, 6);
}

TEST_F(IdentityTest, Pmi) {
  set("PMI_RANK", "4");
  set("MPI_LOCALRANKID", "0");
  set("PMI_SIZE", "6");
  set("MPI_LOCALNRANKS", "3");
  const Identity id = identity_from_environment();
  EXPECT_EQ(id.rank, 4);
  EXPECT_EQ(id.local_rank, 0);
  EXPECT_EQ(id.world_size, 6);
  EXPECT_EQ(id.local_world_size, 3);
}

TEST_F(IdentityTest, RankZeroAndMissingCompanions) {
  set("RANK", "0");
  const Identity id = identity_from_environment();
  EXPECT_EQ(id.rank, 0);
  EXPECT_EQ(id.local_rank, -1);
  EXPECT_EQ(id.world_size, -1);
}

TEST_F(IdentityTest, UnparsableRankFallsThroughToTheNextLauncher) {
  for (const char* bad : {"", "abc", "3x", "-1"}) {
    SCOPED_TRACE(bad);
    set("RANK", bad);
    set("WORLD_SIZE", "8");
    set("SLURM_PROCID", "7");
    set("SLURM_NTASKS", "10");
    const Identity id = identity_from_environment();
    EXPECT_EQ(id.rank, 7);
    EXPECT_EQ(id.world_size, 10);
  }
}

TEST_F(IdentityTest, JobPrecedence) {
  EXPECT_EQ(identity_from_environment().job, "pg" + std::to_string(getpgrp()));
  set("SLURM_JOB_ID", "4242");
  EXPECT_EQ(identity_from_environment().job, "4242");
  set("TORCHELASTIC_RUN_ID", "elastic-run");
  EXPECT_EQ(identity_from_environment().job, "elastic_run");
  set("TRAINSHIM_JOB", "mine");
  EXPECT_EQ(identity_from_environment().job, "mine");
  set("TRAINSHIM_JOB", "");  // empty: ignored
  EXPECT_EQ(identity_from_environment().job, "elastic_run");
}

// torchrun without --rdzv-id names every launch "none": the job is named after the launch's log
// directory instead, so two launches never share a database or a collector.
TEST_F(IdentityTest, TorchrunPlaceholderRunIdIsReplacedByTheLaunchDirectory) {
  set("SLURM_JOB_ID", "4242");
  set("TORCHELASTIC_RUN_ID", "none");
  set("TORCHELASTIC_ERROR_FILE", "/tmp/torchelastic_ab12cd/none_x7y8z9/attempt_0/3/error.json");
  EXPECT_EQ(identity_from_environment().job, "none_x7y8z9");
  EXPECT_EQ(launch_from_environment(), "torchrun:/tmp/torchelastic_ab12cd/none_x7y8z9");
  // A restart is the same launch.
  set("TORCHELASTIC_ERROR_FILE", "/tmp/torchelastic_ab12cd/none_x7y8z9/attempt_12/0/error.json");
  EXPECT_EQ(identity_from_environment().job, "none_x7y8z9");
  EXPECT_EQ(launch_from_environment(), "torchrun:/tmp/torchelastic_ab12cd/none_x7y8z9");
  // A real run id stays the job; the launch still tells two launches of it apart.
  set("TORCHELASTIC_RUN_ID", "exp7");
  EXPECT_EQ(identity_from_environment().job, "exp7");
  EXPECT_EQ(launch_from_environment(), "torchrun:/tmp/torchelastic_ab12cd/none_x7y8z9");
  set("TRAINSHIM_LAUNCH", "mine");
  EXPECT_EQ(launch_from_environment(), "mine");
}

TEST_F(IdentityTest, TorchrunPlaceholderWithoutALaunchDirectoryStaysThePlaceholder) {
  set("TORCHELASTIC_RUN_ID", "none");
  set("TORCHELASTIC_ERROR_FILE", "");  // --log-dir /dev/null
  EXPECT_EQ(identity_from_environment().job, "none");
  EXPECT_EQ(launch_from_environment(), "");
  set("SLURM_JOB_ID", "4242");
  EXPECT_EQ(identity_from_environment().job, "4242");
  EXPECT_EQ(launch_from_environment(), "slurm:4242");
  unsetenv("SLURM_JOB_ID");
  for (const char* not_torchrun : {"/tmp/error.json", "/x/attempt_0/error.json", "/x/y/attempt_/0/error.json",
                                   "/attempt_0/0/error.json", "/a/attempt_0/0/other.json"}) {
    set("TORCHELASTIC_ERROR_FILE", not_torchrun);
    EXPECT_EQ(launch_from_environment(), "") << not_torchrun;
  }
}

}  // namespace
}  // namespace trainshim::shim
