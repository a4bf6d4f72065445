// How the collector is started and how the job's lock is taken, against the faults of the
// reliability review (the section each test reproduces is named in it).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.hpp"
#include "trainshim/collector_lock.hpp"
#include "trainshim/names.hpp"

namespace trainshim::test {
namespace {

std::string launch_prog() { return std::string(Paths::programs) + "/launch_prog"; }

std::string job_env(const Scratch& s) { return preload_env(s.job) + " TRAINSHIM_OUT=" + s.db(); }

const std::string kCopies =
    "SELECT coalesce(sum(c.count), 0) FROM calls c JOIN apis a ON a.id = c.api WHERE a.name = 'cudaMemcpy'";

// The value `sql` reaches once the collector has stored what it expects (bounded wait: a
// collector that never comes leaves the last value seen, for the assertion to show).
int64_t value_once_stored(const std::string& db, const std::string& sql, int64_t expected) {
  int64_t value = -1;
  for (int i = 0; i < 600; ++i) {
    try {
      value = query_int(db, sql);
    } catch (const std::exception&) {
      value = -1;  // not created yet
    }
    if (value == expected) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return value;
}

bool segment_exists(const std::string& job) {
  for (const auto& e : std::filesystem::directory_iterator(std::string(kShmDir)))
    if (e.path().filename().string().starts_with(segment_prefix(getuid(), job))) return true;
  return false;
}

// Removes the job's files another user planted in /dev/shm, and its leftover segments.
struct PlantedFiles {
  explicit PlantedFiles(const std::string& job) : job(job) {}
  ~PlantedFiles() {
    for (int candidate = 0; candidate < kLockCandidates; ++candidate)
      unlink(collector_lock_path(getuid(), job, candidate).c_str());
    for (const auto& e : std::filesystem::directory_iterator(std::string(kShmDir)))
      if (e.path().filename().string().starts_with(segment_prefix(getuid(), job))) unlink(e.path().c_str());
  }
  std::string job;
};

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// Review round 2, §9: the collector took the affinity of the rank that started it; under per-rank
// pinning the node's one collector ran on rank 0's core.
TEST(Launch, TheCollectorOfAPinnedRankRunsOnEveryCpuItMayUse) {
  Scratch s;
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  const auto job = run(job_env(s) + " taskset -c " + std::to_string(cpus.back()) + " " + launch_prog() + " copies 10");
  ASSERT_EQ(job.exit_code, 0) << job.out;
  // The collector stays a while after its job, idle: long enough to be looked at.
  const auto pid = run("pgrep -f 'trainshim-collector --job " + s.job + " '");
  ASSERT_EQ(pid.exit_code, 0) << "no collector";
  std::ifstream status("/proc/" + pid.out.substr(0, pid.out.find('\n')) + "/status");
  std::string line, allowed;
  while (std::getline(status, line))
    if (line.starts_with("Cpus_allowed_list:")) allowed = line.substr(line.find_first_not_of(" \t", 18));
  EXPECT_EQ(allowed, cpulist(cpus));
  run("pkill -TERM -f 'trainshim-collector --job " + s.job + " '");
  for (int i = 0; i < 100 && collector_running(getuid(), s.job); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(collector_running(getuid(), s.job));
}

// Section 2: the first CUDA process used to be the collector's parent, and the collector outlives
// it: a launcher that reaps its children until ECHILD waited forever.
TEST(Launch, JobThatReapsAllItsChildrenIsNotHeldByTheCollector) {
  Scratch s;
  const auto result = run(job_env(s) + " timeout 30 " + launch_prog() + " reap");
  EXPECT_EQ(result.exit_code, 0) << "124: the job waited for the collector as for a child";
  EXPECT_EQ(result.out, "reaped until ECHILD\n");
  EXPECT_EQ(value_once_stored(s.db(), kCopies, 1), 1);
}

// Section 3: the collector inherited the job's descriptors, so a caller reading the job's output
// (standard output and error) to its end waited for the collector's exit.
TEST(Launch, CapturedOutputEndsWithTheJobNotWithTheCollector) {
  Scratch s;
  const auto result = run("out=$(" + job_env(s) + " " + launch_prog() + " copies 10 2>&1); echo \"captured $out\"");
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.out, "captured copies=10\n");
  EXPECT_TRUE(collector_running(getuid(), s.job)) << "the collector is gone: the command substitution waited for it";
  EXPECT_EQ(value_once_stored(s.db(), kCopies, 10), 10);
}

// Section 3: a lock the job held (a cron job's "only one at a time") stayed held by the collector.
TEST(Launch, LockHeldByTheJobIsFreeOnceTheJobExits) {
  Scratch s;
  const std::string job_lock = s.dir + "/cron.lock";
  const auto result =
      run("sh -c '( flock -n 9 || exit 9; " + job_env(s) + " " + launch_prog() + " copies 10 >/dev/null ) 9>" +
          job_lock + " && flock -n " + job_lock + " echo free || echo held'");
  EXPECT_EQ(result.out, "free\n");
  EXPECT_TRUE(collector_running(getuid(), s.job)) << "the collector must still run for the lock to say anything";
  EXPECT_EQ(value_once_stored(s.db(), kCopies, 10), 10);
}

// Section 10: another user creates the job's lock file first, open to all, and holds it. The
// shim saw a collector running, started none, and said nothing.
TEST(Launch, AnotherUsersLockFileIsRefusedAndTheJobIsStillCollected) {
  Scratch s;
  share_with_other_users(s);
  PlantedFiles planted(s.job);
  const std::string lock = collector_lock_path(getuid(), s.job);
  ASSERT_EQ(run(as_other_user("sh -c 'umask 0; : > " + lock + "'")).exit_code, 0);
  struct stat st {};
  ASSERT_EQ(stat(lock.c_str(), &st), 0);
  ASSERT_EQ(st.st_uid, kOtherUid);
  // The flock is taken here, on the other user's file: for the victim it is the same as the
  // other user's process holding it.
  const int held = open(lock.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX | LOCK_NB), 0);

  const auto result = run("cd " + s.dir + " && " + job_env(s) + " " + launch_prog() + " copies 10 2>&1");
  close(held);
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("refused the lock file " + lock + " (owned by uid 65534)"), std::string::npos)
      << result.out;
  EXPECT_EQ(value_once_stored(s.db(), kCopies, 10), 10);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM collector_log WHERE level = 'warning' AND message LIKE "
                              "'refused the lock file " +
                                  lock + " (owned by uid 65534)%'"),
            1)
      << "the collector's own log names the refused file too";
}

// Section 10: a symbolic link planted at the lock's name made the victim create its target.
TEST(Launch, SymbolicLinkAtTheLocksNameIsNotFollowed) {
  Scratch s;
  share_with_other_users(s);
  PlantedFiles planted(s.job);
  const std::string lock = collector_lock_path(getuid(), s.job);
  const std::string target = s.dir + "/created_through_the_link";
  ASSERT_EQ(run(as_other_user("ln -s " + target + " " + lock)).exit_code, 0);

  const auto result = run("cd " + s.dir + " && " + job_env(s) + " " + launch_prog() + " copies 10 2>&1");
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("refused the lock file " + lock + " (a symbolic link)"), std::string::npos) << result.out;
  EXPECT_EQ(value_once_stored(s.db(), kCopies, 10), 10);
  EXPECT_FALSE(std::filesystem::exists(target));
}

// Section 10: with every name taken by another user, no collector can be started safely: one
// clear message, and the job runs unchanged.
TEST(Launch, EveryLockNameTakenStartsNoCollectorWithOneMessage) {
  Scratch s;
  share_with_other_users(s);
  PlantedFiles planted(s.job);
  std::string create;
  // Appended piece by piece: GCC 12 in Release warns falsely (-Wrestrict) on `" " + std::string`.
  for (int candidate = 0; candidate < kLockCandidates; ++candidate) {
    create += ' ';
    create += collector_lock_path(getuid(), s.job, candidate);
  }
  ASSERT_EQ(run(as_other_user("touch" + create)).exit_code, 0);

  const auto result = run("cd " + s.dir + " && " + job_env(s) + " " + launch_prog() + " copies 10 2>&1");
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_EQ(occurrences(result.out, no_usable_lock_message(s.job)), 1u) << result.out;
  EXPECT_NE(result.out.find("copies=10"), std::string::npos);
  EXPECT_TRUE(segment_exists(s.job)) << "the events wait in shared memory";
  EXPECT_FALSE(std::filesystem::exists(s.db()));
}

// Section 12: with a relative LD_PRELOAD, the collector was looked up relative to the directory
// the program had changed to by its first CUDA call.
TEST(Launch, RelativePreloadAndChdirRunTheRealCollector) {
  Scratch s;
  const std::string planted = s.dir + "/elsewhere";
  std::filesystem::create_directories(planted + "/bin");
  const std::string fake = planted + "/bin/trainshim-collector";
  std::ofstream(fake) << "#!/bin/sh\ntouch " << planted << "/FAKE_COLLECTOR_RAN\n";
  std::filesystem::permissions(fake, std::filesystem::perms(0755));
  const std::filesystem::path bin(Paths::bin);
  const auto result =
      run("cd " + bin.parent_path().string() + " && TRAINSHIM_JOB=" + s.job + " TRAINSHIM_OUT=" + s.db() +
          " TRAINSHIM_COLLECTOR_IDLE_S=" + kTestCollectorIdleSeconds + " LD_PRELOAD=" + bin.filename().string() +
          "/libtrainshim.so " + launch_prog() + " chdir " + planted + " 10");
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_EQ(value_once_stored(s.db(), kCopies, 10), 10) << "the real collector did not run";
  EXPECT_FALSE(std::filesystem::exists(planted + "/FAKE_COLLECTOR_RAN"));
}

// Section 14: Ctrl-C reached the collector of `trainshim run` (same process group), which
// stopped while the job, handling the interrupt, carried on recording into an undrained segment.
TEST(Launch, InterruptOfTrainshimRunLeavesTheCollectorToDrainTheJob) {
  Scratch s;
  // setsid: the interrupt goes to trainshim run's process group, not to the test's.
  const auto result = run("cd " + s.dir + " && TRAINSHIM_JOB=" + s.job + " setsid -w " + trainshim_cli() +
                          " run --no-report --out " + s.db() + " -- " + launch_prog() + " interrupt 20 30");
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.out, "copies=50\n");
  EXPECT_EQ(query_int(s.db(), kCopies), 50);
  EXPECT_EQ(query_int(s.db(), "SELECT ended FROM processes"), 1);
  EXPECT_FALSE(segment_exists(s.job));
}

// Section 17: a process that starts while the collector exits finds the lock still held and
// starts none; it must check again and start one once the lock is free.
TEST(Launch, ProcessStartedWhileTheCollectorExitedIsCollected) {
  Scratch s;
  const auto result = run(job_env(s) + " " + launch_prog() + " recheck 10");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  int copies = 0;
  ASSERT_EQ(std::sscanf(result.out.c_str(), "copies=%d", &copies), 1) << result.out;
  EXPECT_EQ(value_once_stored(s.db(), "SELECT ended FROM processes", 1), 1);
  EXPECT_EQ(query_int(s.db(), kCopies), copies);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM collector_log WHERE message LIKE 'collector % started%'"), 1);
}

// Section 19: nonsense idle times ran forever; a job id with no segment left an empty database.
TEST(Launch, CollectRefusesBadIdleTimesAndSaysWhenNoSegmentExists) {
  Scratch s;
  // timeout: before the fix these ran until killed.
  const auto negative = run("timeout 10 " + trainshim_cli() + " collect --job " + s.job + " --idle-exit -5 2>&1");
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_NE(negative.out.find("--idle-exit -5"), std::string::npos) << negative.out;
  const auto collector = run("timeout 10 " + std::string(Paths::bin) + "/trainshim-collector --job " + s.job +
                             " --exit-when-idle -1 2>&1");
  EXPECT_EQ(collector.exit_code, 2);
  EXPECT_NE(collector.out.find("--exit-when-idle -1"), std::string::npos) << collector.out;

  const auto absent = run(trainshim_cli() + " collect --job " + s.job + " --out " + s.db() + " --idle-exit 0.3 2>&1");
  EXPECT_EQ(absent.exit_code, 1);
  EXPECT_NE(absent.out.find("no segment of job " + s.job + " was found"), std::string::npos) << absent.out;
  EXPECT_FALSE(std::filesystem::exists(s.db()));
}

}  // namespace
}  // namespace trainshim::test
