// Recording starts without losing the calls of threads that arrive while it starts: they wait for
// the segment (bounded) instead of dropping their events.
#include <gtest/gtest.h>

#include <string>

#include "harness.hpp"

namespace trainshim::test {
namespace {

int64_t stored_calls(const std::string& db, const std::string& api) { return count_api(db, api); }
// The copies themselves are kept in the window of recent copies (20,000 per process, far above
// this job's 400): their threads are there.
// The threads whose copies were kept one by one: in `events` when they carry stacks (pageable
// memory), else in the window of recent copies (not the GPU timeline's edges, which are no call).
int64_t stored_threads(const std::string& db) {
  return query_int(
      db, "SELECT count(DISTINCT tid) FROM (SELECT tid FROM events WHERE api NOT IN (SELECT id FROM apis WHERE "
          "class = 'gpu_window') UNION ALL SELECT tid FROM recent_events)");
}

TEST(Start, ThreadsWhoseFirstCallsComeTogetherLoseNone) {
  constexpr int kThreads = 8;
  constexpr int kCopies = 50;
  // Repeated: which thread starts recording, and how many arrive meanwhile, changes run to run.
  for (int attempt = 0; attempt < 3; ++attempt) {
    Scratch s;
    const auto result =
        run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --out " + s.db() + " -- " +
            program("start_race_prog") + " " + std::to_string(kThreads) + " " + std::to_string(kCopies));
    ASSERT_EQ(result.exit_code, 0) << result.out;
    EXPECT_EQ(stored_calls(s.db(), "cudaMemcpyAsync"), kThreads * kCopies);
    EXPECT_EQ(stored_threads(s.db()), kThreads);
    EXPECT_EQ(query_int(s.db(), "SELECT dropped_not_ready FROM processes"), 0);
    EXPECT_EQ(query_int(s.db(), "SELECT dropped_ring_full + lost_unpublished + malformed FROM processes"), 0);
    EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes"), 1);
  }
}

}  // namespace
}  // namespace trainshim::test
