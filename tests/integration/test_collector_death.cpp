// Review §13: a collector that dies mid-run (SIGKILL, the out-of-memory killer) loses nothing and
// counts nothing twice: records leave a ring only once committed, and the collector that replaces
// it carries on with the same process row from where the dead one committed.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

namespace trainshim::test {
namespace {

namespace fs = std::filesystem;

// steady_calls: per iteration two copies, a sync and a poll; a pause of 2 ms between iterations.
constexpr int kIterations = 1500;
const std::string kSteadyCalls = "steady_calls " + std::to_string(kIterations) + " 2000";

bool running(pid_t pid) {
  return kill(pid, 0) == 0 && read_file("/proc/" + std::to_string(pid) + "/stat").find(") Z ") == std::string::npos;
}

// Starts `command` in the background (its output in `out`); returns its pid.
pid_t start(const std::string& command, const std::string& out) {
  // run() prefixes the runtime's LD_LIBRARY_PATH to a simple command; a background one needs it exported.
  const std::string library_path = "export LD_LIBRARY_PATH=" + std::string(Paths::simcuda) + "; ";
  const auto started = run("true; " + library_path + command + " >" + out + " 2>&1 & echo $!");
  return pid_t(std::stol(started.out));
}

int64_t stored_calls(const std::string& db) {
  if (!fs::exists(db)) return 0;
  return query_int(db, "SELECT coalesce((SELECT sum(count) FROM calls), 0)");
}

void expect_exact(const std::string& db) {
  EXPECT_EQ(query_int(db, "SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(query_int(db, "SELECT ended FROM processes"), 1);
  EXPECT_EQ(count_api(db, "cudaMemcpyAsync"), 2 * kIterations);
  EXPECT_EQ(count_api(db, "cudaStreamSynchronize"), kIterations);
  EXPECT_EQ(count_api(db, "cudaStreamQuery"), kIterations);
  EXPECT_EQ(count_api(db, "cudaMallocHost"), 1);
  EXPECT_EQ(count_api(db, "cudaFreeHost"), 1);
  EXPECT_EQ(count_api(db, "cudaFree"), 1);
  // The GPU timeline's records, as many as its first window saw, each stored once as well, and its
  // edges (on, off: as many as the duty cycle turned), each kept once.
  const int64_t gpu_records = query_int(db, "SELECT coalesce(sum(c.count), 0) FROM calls c JOIN apis a ON a.id = c.api "
                                            "WHERE a.class IN ('gpu_kernel', 'gpu_copy', 'gpu_memset')");
  EXPECT_EQ(query_int(db, "SELECT count(*) FROM gpu_activities"), gpu_records);
  const int64_t edges =
      query_int(db, "SELECT coalesce(sum(c.count), 0) FROM calls c JOIN apis a ON a.id = c.api WHERE a.class = "
                    "'gpu_window'");
  EXPECT_GE(edges, 2);
  EXPECT_EQ(query_int(db, "SELECT count(*) FROM events e JOIN apis a ON a.id = e.api WHERE a.class = 'gpu_window'"),
            edges);
  EXPECT_EQ(query_int(db, "SELECT events FROM processes"), 4 * kIterations + 3 + gpu_records + edges);
  EXPECT_EQ(query_int(db, "SELECT dropped_ring_full + dropped_not_ready + lost_unpublished + malformed + "
                          "dropped_side_full FROM processes"),
            0);
  EXPECT_EQ(query_int(db, "SELECT count(*) FROM events e JOIN apis a ON a.id = e.api WHERE a.name = "
                          "'cudaStreamSynchronize'"),
            kIterations)
      << "each sync kept once";
}

TEST(CollectorDeath, AKilledCollectorIsReplacedByTheShimAndNothingIsLostOrCountedTwice) {
  Scratch s;
  // Every record a hooked call's: the sampler's own records (counted as records too) are off.
  const pid_t job =
      start("TRAINSHIM_OUT=" + s.db() + " TRAINSHIM_SAMPLE_HZ=0 " + preload_env(s.job) + " " + program(kSteadyCalls),
            s.dir + "/job.out");
  ASSERT_TRUE(eventually([&] { return collectors_of(s.job).size() == 1 && stored_calls(s.db()) > 0; }))
      << "the collector never stored anything";
  const pid_t first = collectors_of(s.job).front();
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_TRUE(eventually([&] {
    const auto now = collectors_of(s.job);
    return now.size() == 1 && now.front() != first;
  })) << "no collector replaced the killed one";
  ASSERT_TRUE(eventually([&] { return !running(job); }));
  EXPECT_EQ(read_file(s.dir + "/job.out"), "done " + std::to_string(kIterations) + "\n");
  ASSERT_TRUE(eventually([&] { return query_int(s.db(), "SELECT min(ended) FROM processes") == 1; }));
  expect_exact(s.db());
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM collector_log WHERE message LIKE 'resumed reading /dev/shm/%'"), 1);
}

TEST(CollectorDeath, WhatAKilledCollectorLeftIsDrainedByTrainshimCollect) {
  Scratch s;
  const pid_t job =
      start(preload_env(s.job) + " TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_SAMPLE_HZ=0 " + program(kSteadyCalls),
            s.dir + "/job.out");
  start(trainshim_cli() + " collect --job " + s.job + " --out " + s.db(), s.dir + "/collect.out");
  ASSERT_TRUE(eventually([&] { return collectors_of(s.job).size() == 1 && stored_calls(s.db()) > 0; }))
      << "the collector never stored anything";
  ASSERT_EQ(kill(collectors_of(s.job).front(), SIGKILL), 0);
  ASSERT_TRUE(eventually([&] { return !running(job); }));
  EXPECT_EQ(read_file(s.dir + "/job.out"), "done " + std::to_string(kIterations) + "\n");
  EXPECT_LT(stored_calls(s.db()), 4 * kIterations + 3) << "the job outran the killed collector";
  const auto collect = run(trainshim_cli() + " collect --job " + s.job + " --out " + s.db() + " --idle-exit 0.5");
  ASSERT_EQ(collect.exit_code, 0);
  expect_exact(s.db());
}

// The job's files in /dev/shm (segments, the collector's lock).
std::vector<std::string> shm_files_of(const std::string& job) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().find("-" + job) != std::string::npos) files.push_back(entry.path());
  return files;
}

// Issue 23: a collector SIGKILLed at a random moment of a job that fills its rings (2 threads x
// 20,000 copy + sync pairs, no pause), then `trainshim collect`: every record is stored once or
// counted as lost, never both, never twice, and nothing is left in /dev/shm. The round-2 review
// found 962 and 19,406 of 80,000 neither stored nor counted, and 43 stored twice, in 9 runs.
// TRAINSHIM_DEATH_TRIALS runs (default 10; scripts/collector-death-trials runs 100).
TEST(CollectorDeath, KilledAtRandomMomentsEveryRecordIsStoredOnceOrCountedLost) {
  const char* asked = std::getenv("TRAINSHIM_DEATH_TRIALS");
  const int trials = asked && *asked ? std::atoi(asked) : 10;
  std::mt19937 random(std::random_device{}());
  for (int trial = 0; trial < trials; ++trial) {
    Scratch s;
    const int delay_ms = std::uniform_int_distribution<int>(50, 700)(random);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", killed after " + std::to_string(delay_ms) + " ms");
    const pid_t job = start(preload_env(s.job) +
                                " TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_SAMPLE_HZ=0 "
                                "TRAINSHIM_GPU_TIMELINE=0 " +
                                program("host_copies_prog 20000 2"),
                            s.dir + "/job.out");
    const pid_t first =
        start("exec " + trainshim_cli() + " collect --job " + s.job + " --out " + s.db(), s.dir + "/collect.out");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    EXPECT_LE(collectors_of(s.job).size(), 1u);
    kill(first, SIGKILL);
    ASSERT_TRUE(eventually([&] { return !running(job) && !running(first); }));
    EXPECT_EQ(read_file(s.dir + "/job.out"), "done 2 x 20000\n");
    // What the killed one left, if anything, drained by another; or, when it had drained it all,
    // only its lock file, removed.
    const auto collect = run(trainshim_cli() + " collect --job " + s.job + " --out " + s.db() + " --idle-exit 0.5");
    EXPECT_LE(collect.exit_code, 1) << collect.out;
    const int64_t copies = count_api(s.db(), "cudaMemcpyAsync"), syncs = count_api(s.db(), "cudaStreamSynchronize");
    const int64_t lost = query_int(s.db(), "SELECT dropped_ring_full + dropped_not_ready + lost_unpublished + "
                                           "malformed + dropped_side_full FROM processes");
    EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes"), 1);
    EXPECT_EQ(query_int(s.db(), "SELECT ended FROM processes"), 1);
    EXPECT_LE(copies, 40000);
    EXPECT_LE(syncs, 40000);
    EXPECT_EQ(copies + syncs + lost, 80000) << copies << " copies, " << syncs << " syncs, " << lost << " lost";
    EXPECT_EQ(query_int(s.db(), "SELECT events FROM processes"), stored_calls(s.db()));
    EXPECT_EQ(shm_files_of(s.job), std::vector<std::string>{});
  }
}

// Issue 23: `trainshim run` SIGKILLed with its process group (a scheduler, an impatient user) left
// its collector running for good, in the session of its own that keeps it from the job's signals.
TEST(CollectorDeath, TheCollectorOfAKilledTrainshimRunExitsOnceItsJobIsGone) {
  Scratch s;
  // setsid: trainshim run leads a process group of its own, with the job in it.
  const pid_t trainshim = start("TRAINSHIM_JOB=" + s.job + " TRAINSHIM_SAMPLE_HZ=0 exec setsid " + trainshim_cli() +
                                    " run --no-report --out " + s.db() + " -- " + program(kSteadyCalls),
                                s.dir + "/run.out");
  ASSERT_TRUE(eventually([&] { return collectors_of(s.job).size() == 1 && stored_calls(s.db()) > 0; }))
      << "the collector never stored anything";
  const pid_t collector = collectors_of(s.job).front();
  ASSERT_EQ(kill(-trainshim, SIGKILL), 0);
  ASSERT_TRUE(eventually([&] { return !running(trainshim); }));
  EXPECT_TRUE(running(collector)) << "the collector went with trainshim run: the killed job's records are not drained";
  ASSERT_TRUE(eventually([&] { return !running(collector); })) << "the collector outlived its job";
  EXPECT_EQ(query_int(s.db(), "SELECT ended FROM processes"), 1);
  EXPECT_EQ(
      query_int(s.db(), "SELECT dropped_ring_full + dropped_not_ready + lost_unpublished + malformed FROM processes"),
      0);
  for (const auto& entry : fs::directory_iterator("/dev/shm"))
    EXPECT_EQ(entry.path().filename().string().find(s.job), std::string::npos) << entry.path();
}

// Issue 23: however the run ends, its collector drains what is left, finishes the database and
// exits, and nothing is left in /dev/shm: SIGTERM to `trainshim run` (a scheduler, Kubernetes) is
// passed on to the job, and trainshim exits with the job's status; the job SIGKILLed (the OOM
// killer, a hang killed by hand) under trainshim run.
struct RunEnding {
  const char* name;
  bool to_job;  // the signal goes to the job, else to trainshim run
  int signal;
};

class EndedRun : public ::testing::TestWithParam<RunEnding> {};

TEST_P(EndedRun, TheCollectorFinishesTheDatabaseAndExitsAndNothingIsLeft) {
  Scratch s;
  const std::string pid_file = s.dir + "/trainshim.pid", status_file = s.dir + "/status";
  start("(TRAINSHIM_JOB=" + s.job + " TRAINSHIM_SAMPLE_HZ=0 " + trainshim_cli() + " run --no-report --out " + s.db() +
            " -- " + program(kSteadyCalls) + " & echo $! >" + pid_file + "; wait $!; echo $? >" + status_file + ")",
        s.dir + "/run.out");
  ASSERT_TRUE(eventually([&] { return collectors_of(s.job).size() == 1 && stored_calls(s.db()) > 0; }))
      << "the collector never stored anything";
  const pid_t trainshim = pid_t(std::stol(read_file(pid_file)));
  pid_t target = trainshim;
  if (GetParam().to_job) {
    // The child of trainshim run that runs the job's program.
    std::istringstream children(
        read_file("/proc/" + std::to_string(trainshim) + "/task/" + std::to_string(trainshim) + "/children"));
    target = 0;
    for (pid_t child = 0; children >> child;) {
      std::error_code ec;
      if (fs::read_symlink("/proc/" + std::to_string(child) + "/exe", ec) == fs::path(program("steady_calls")))
        target = child;
    }
    ASSERT_NE(target, 0);
  }
  ASSERT_EQ(kill(target, GetParam().signal), 0);
  ASSERT_TRUE(eventually([&] { return !read_file(status_file).empty(); }));
  EXPECT_EQ(read_file(status_file), std::to_string(128 + GetParam().signal) + "\n") << read_file(s.dir + "/run.out");
  ASSERT_TRUE(eventually([&] { return collectors_of(s.job).empty(); })) << "the collector outlived its job";
  // The job was stopped by the signal, not left running without trainshim to finish on its own.
  EXPECT_EQ(read_file(s.dir + "/run.out").find("done"), std::string::npos) << read_file(s.dir + "/run.out");
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(query_int(s.db(), "SELECT ended FROM processes"), 1);
  EXPECT_GT(count_api(s.db(), "cudaStreamSynchronize"), 0);
  EXPECT_EQ(query_int(s.db(), "SELECT dropped_ring_full + dropped_not_ready + lost_unpublished + malformed + "
                              "dropped_side_full FROM processes"),
            0);
  EXPECT_EQ(shm_files_of(s.job), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Ways, EndedRun,
                         ::testing::Values(RunEnding{"sigterm_to_trainshim_run", false, SIGTERM},
                                           RunEnding{"sighup_to_trainshim_run", false, SIGHUP},
                                           RunEnding{"job_sigkilled", true, SIGKILL}),
                         [](const auto& info) { return std::string(info.param.name); });

// A torchrun rank lives in a session of its own and may end a moment after the launcher that
// trainshim run waits for: the collector, stopped then, drains its segment once it ends instead of
// leaving it in /dev/shm. The launcher ends once the rank has made its first call (its segment,
// not the collector's lock file, is there), as a torchrun does only after its ranks started: a
// fixed sleep lost that race on a loaded machine.
TEST(CollectorDeath, ARankThatOutlivesItsLauncherIsStillDrainedAndRemoved) {
  Scratch s;
  constexpr int kCalls = 100;
  const auto result = run("cd " + s.dir + " && TRAINSHIM_JOB=" + s.job + " TRAINSHIM_SAMPLE_HZ=0 " + trainshim_cli() +
                          " run --no-report --out " + s.db() + " -- sh -c 'setsid " +
                          program("steady_calls " + std::to_string(kCalls) + " 2000") +
                          " >rank.out & for i in $(seq 3000); do ls /dev/shm/trainshim-$(id -u)-" + s.job +
                          "-* >/dev/null 2>&1 && break; sleep 0.01; done'");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  ASSERT_TRUE(eventually([&] { return read_file(s.dir + "/rank.out") == "done " + std::to_string(kCalls) + "\n"; }));
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(query_int(s.db(), "SELECT ended FROM processes"), 1);
  EXPECT_EQ(count_api(s.db(), "cudaStreamSynchronize"), kCalls);
  for (const auto& entry : fs::directory_iterator("/dev/shm"))
    EXPECT_EQ(entry.path().filename().string().find(s.job), std::string::npos) << entry.path();
}

}  // namespace
}  // namespace trainshim::test
