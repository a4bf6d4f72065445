// What the collector trusts in a segment, with real processes: the owner and mode of the file
// (review §6), the geometry and size of a segment whose writer changes them after validation (§8),
// and the liveness of producers it cannot see by pid (§18).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <thread>

#include "harness.hpp"
#include "trainshim/names.hpp"

namespace trainshim::test {
namespace {

bool segment_exists(const std::string& name) { return std::filesystem::exists(std::string(kShmDir) + "/" + name); }

int segments_of(const std::string& job) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(kShmDir)))
    n += e.path().filename().string().starts_with(segment_prefix(getuid(), job));
  return n;
}

int64_t value_once_written(const std::string& db, const std::string& sql) {
  return std::filesystem::exists(db) ? query_int(db, sql) : -1;
}

std::string collect(const Scratch& s, const std::string& idle_seconds) {
  return trainshim_cli() + " collect --job " + s.job + " --out " + s.db() + " --idle-exit " + idle_seconds;
}

// Removes a file the test planted in /dev/shm, whatever the outcome.
struct Planted {
  std::string name;
  ~Planted() { std::filesystem::remove(std::string(kShmDir) + "/" + name); }
};

constexpr const char* kCopies =
    "SELECT coalesce(sum(c.count), 0) FROM calls c JOIN apis a ON a.id = c.api WHERE a.name = 'cudaMemcpy'";
// The job's own copies, not the forged one.
constexpr const char* kJobCopies = "SELECT coalesce(sum(c.count), 0) FROM calls c JOIN apis a ON a.id = c.api JOIN "
                                   "processes p ON p.id = c.process_id WHERE a.name = 'cudaMemcpy' AND "
                                   "p.host <> 'FORGED-HOST'";

// Review §6: another local user plants a valid segment (mode 0666) under the victim's job.
TEST(SegmentTrust, SegmentPlantedByAnotherUserIsRefusedAndNamed) {
  Scratch s;
  share_with_other_users(s);
  const Planted forged{segment_name(getuid(), s.job, 99999)};
  const auto forge = run(as_other_user(program("forge_segment") + " " + forged.name + " inject"));
  ASSERT_EQ(forge.exit_code, 0) << forge.out;
  ASSERT_TRUE(segment_exists(forged.name));

  const Gate gate{s.dir + "/open"};
  gate.open();
  const auto result = run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --out " + s.db() + " -- " +
                          program("gated_copies") + " 5 " + gate.path);
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out.find("FORGED"), std::string::npos) << result.out;
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes WHERE host = 'FORGED-HOST' OR job = 'forged'"), 0);
  EXPECT_EQ(query_int(s.db(), kCopies), 10);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM (SELECT bytes FROM events UNION ALL SELECT bytes FROM "
                              "recent_events UNION ALL SELECT bytes FROM calls) WHERE bytes >= " +
                                  std::to_string(1337ull << 30)),
            0);
  const std::string path = std::string(kShmDir) + "/" + forged.name;
  const std::string refusal = "skipped segment " + path + ": not trusted: owned by uid " + std::to_string(kOtherUid) +
                              ", mode 0666 (only a regular file of this user, uid " + std::to_string(getuid()) +
                              ", that no one else may read or write is read); another local user may be injecting "
                              "records into this job: check who created " +
                              path + ", then remove it";
  EXPECT_EQ(
      query_int(s.db(), "SELECT count(*) FROM collector_log WHERE level = 'warning' AND message = '" + refusal + "'"),
      1);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM collector_log WHERE level = 'warning'"), 1);
  EXPECT_TRUE(segment_exists(forged.name)) << "not the collector's to delete";
}

// Review §8: a writer of the segment (here its own user) shrinks it or rewrites its geometry after
// the collector validated it. The collector survives, says so, and keeps collecting the job.
void collector_survives(const std::string& action, bool dropped) {
  Scratch s;
  const Planted forged{segment_name(getuid(), s.job, 99999)};
  std::future<Outcome> job, forge, collector;
  const Gate gate{s.dir + "/open"};
  job = in_background(preload_env(s.job) + " TRAINSHIM_SPAWN_COLLECTOR=0 " + program("gated_copies") + " 20 " +
                      gate.path);
  forge = in_background(program("forge_segment") + " " + forged.name + " " + action + " 0600");
  ASSERT_TRUE(eventually([&] { return segments_of(s.job) == 2; }));
  collector = in_background(collect(s, "0.5"));

  const Outcome forge_done = forge.get();
  ASSERT_EQ(forge_done.exit_code, 0) << forge_done.out;
  // The job keeps running after the attack; its first half is collected before the gate opens.
  EXPECT_TRUE(eventually([&] { return value_once_written(s.db(), kJobCopies) == 20; }));
  const std::string warning =
      "dropped segment " + std::string(kShmDir) + "/" + forged.name + ": it shrank while being read";
  if (dropped) {
    EXPECT_TRUE(eventually(
        [&] { return value_once_written(s.db(), "SELECT count(*) FROM collector_log WHERE level = 'warning'") == 1; }));
  }
  gate.open();
  EXPECT_EQ(job.get().exit_code, 0);
  const Outcome collected = collector.get();
  EXPECT_EQ(collected.exit_code, 0) << "the collector must survive " << action;

  EXPECT_EQ(query_int(s.db(), kJobCopies), 40);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes WHERE host <> 'FORGED-HOST' AND ended = 1"), 1);
  EXPECT_EQ(query_int(s.db(), "SELECT events FROM processes WHERE host = 'FORGED-HOST'"), 1)
      << "its one record was drained before the attack";
  const int64_t warnings = query_int(s.db(), "SELECT count(*) FROM collector_log WHERE level = 'warning'");
  EXPECT_EQ(warnings, dropped ? 1 : 0);
  EXPECT_EQ(query_int(s.db(),
                      "SELECT count(*) FROM collector_log WHERE level = 'warning' AND message LIKE '" + warning + "%'"),
            dropped ? 1 : 0);
  EXPECT_EQ(segments_of(s.job), dropped ? 1 : 0) << "a dropped segment is left for inspection";
}

TEST(SegmentTrust, SegmentShrunkAfterValidationIsDroppedAndTheJobStillCollected) {
  collector_survives("truncate", true);
}

TEST(SegmentTrust, GeometryRewrittenAfterValidationIsNeverUsed) { collector_survives("geometry", false); }

// Review §18: a producer in another pid namespace (a container sharing /dev/shm). Its pid means
// nothing to the collector; its liveness lock does.
TEST(SegmentTrust, ProducerInAnotherPidNamespaceIsCollectedUntilItExits) {
  Scratch s;
  std::future<Outcome> job, collector;
  const Gate gate{s.dir + "/open"};
  job = in_background(preload_env(s.job) + " TRAINSHIM_SPAWN_COLLECTOR=0 unshare -pf --mount-proc " +
                      program("gated_copies") + " 150 " + gate.path);
  ASSERT_TRUE(eventually([&] { return segments_of(s.job) == 1; }));
  collector = in_background(collect(s, "0.5"));

  ASSERT_TRUE(eventually([&] { return value_once_written(s.db(), kCopies) == 150; }));
  EXPECT_EQ(query_int(s.db(), "SELECT pid FROM processes"), 1) << "pid 1 of its own namespace";
  EXPECT_EQ(query_int(s.db(), "SELECT ended FROM processes"), 0) << "it is still running";
  EXPECT_EQ(segments_of(s.job), 1) << "a live producer's segment must stay";

  gate.open();
  EXPECT_EQ(job.get().exit_code, 0);
  EXPECT_EQ(collector.get().exit_code, 0);
  EXPECT_EQ(query_int(s.db(), kCopies), 300);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(query_int(s.db(), "SELECT ended FROM processes"), 1);
  EXPECT_EQ(query_int(s.db(), "SELECT dropped_ring_full + dropped_not_ready + lost_unpublished FROM processes"), 0);
  EXPECT_EQ(segments_of(s.job), 0);
}

// The lock is dropped when an image execs (its descriptor is close-on-exec): the old image's
// segment is drained and retired while the new image, with the same pid, still runs.
TEST(SegmentTrust, ExecRetiresTheOldImagesSegment) {
  Scratch s;
  std::future<Outcome> job, collector;
  const Gate gate{s.dir + "/open"};
  job = in_background(preload_env(s.job) +
                      " TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_SAMPLE_HZ=0 TRAINSHIM_GPU_TIMELINE=0 " +
                      program("gated_copies") + " exec 7 11 " + gate.path);
  // Both images' segments, the new one made under the same pid while the old one is still there.
  ASSERT_TRUE(eventually([&] { return segments_of(s.job) == 2; }));
  collector = in_background(collect(s, "0.5"));

  ASSERT_TRUE(eventually([&] { return value_once_written(s.db(), "SELECT count(*) FROM processes") == 2; }));
  EXPECT_TRUE(eventually([&] { return value_once_written(s.db(), "SELECT sum(ended) FROM processes") == 1; }));
  EXPECT_EQ(query_int(s.db(), "SELECT events FROM processes WHERE ended = 1"), 7 + 1)
      << "the old image's copies and its cudaFree";
  EXPECT_EQ(query_int(s.db(), "SELECT count(DISTINCT pid) FROM processes"), 1);
  EXPECT_EQ(segments_of(s.job), 1) << "only the running image's segment is left";

  gate.open();
  EXPECT_EQ(job.get().exit_code, 0);
  EXPECT_EQ(collector.get().exit_code, 0);
  EXPECT_EQ(query_int(s.db(), "SELECT sum(ended) FROM processes"), 2);
  EXPECT_EQ(query_int(s.db(), kCopies), 7 + 11 + 11);
  EXPECT_EQ(segments_of(s.job), 0);
}

}  // namespace
}  // namespace trainshim::test
