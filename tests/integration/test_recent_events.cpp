// The window of recent copies and polls: its size from TRAINSHIM_RECENT_EVENTS (the collector is
// started with the job's environment) or the collector's --recent-events.
#include <gtest/gtest.h>

#include <string>

#include "harness.hpp"

namespace trainshim::test {
namespace {

// steady_calls 10 0: 20 copies and 10 polls (the window's classes), 10 syncs and 3 other calls.
void record_without_collector(const Scratch& s) {
  const auto job = run(preload_env(s.job) + " TRAINSHIM_SPAWN_COLLECTOR=0 " + program("steady_calls") + " 10 0");
  ASSERT_EQ(job.exit_code, 0);
}

std::string collector() { return std::string(Paths::bin) + "/trainshim-collector"; }

TEST(RecentEvents, TheEnvironmentSetsTheWindowAndCountsStayWhole) {
  Scratch s;
  record_without_collector(s);
  const auto collect = run("TRAINSHIM_RECENT_EVENTS=4 " + trainshim_cli() + " collect --job " + s.job + " --out " +
                           s.db() + " --idle-exit 0.2");
  ASSERT_EQ(collect.exit_code, 0);
  // The last iteration's two copies and poll, after the ninth's poll.
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM recent_events"), 4);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM recent_events e JOIN apis a ON a.id = e.api WHERE "
                              "a.name = 'cudaStreamQuery'"),
            2);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync"), 20);
  EXPECT_EQ(count_api(s.db(), "cudaStreamQuery"), 10);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM events"), 10 + 3 + 2)
      << "the syncs, the pinned allocation and the frees (not the window's classes), and the GPU timeline's on and "
         "off edges";
}

TEST(RecentEvents, TheFlagWinsOverTheEnvironmentAndZeroKeepsNone) {
  Scratch s;
  record_without_collector(s);
  const auto collect = run("TRAINSHIM_RECENT_EVENTS=4 " + collector() + " --job " + s.job + " --out " + s.db() +
                           " --exit-when-idle 0.2 --recent-events 0");
  ASSERT_EQ(collect.exit_code, 0);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM recent_events"), 0);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync"), 20);
}

TEST(RecentEvents, AValueThatIsNoCountIsRefusedWithWhatIsAllowed) {
  Scratch s;
  for (const char* value : {"-1", "20k", "1000001"}) {
    SCOPED_TRACE(value);
    const auto collect = run(std::string("TRAINSHIM_RECENT_EVENTS=") + value + " " + collector() + " --job " + s.job +
                             " --out " + s.db() + " --exit-when-idle 0.2 2>&1");
    EXPECT_EQ(collect.exit_code, 2);
    EXPECT_EQ(collect.out, std::string("trainshim-collector: TRAINSHIM_RECENT_EVENTS=") + value +
                               " is not a number of events from 0 to 1000000\n");
  }
  const auto flag = run(collector() + " --job " + s.job + " --out " + s.db() + " --recent-events 1000001 2>&1");
  EXPECT_EQ(flag.exit_code, 2);
}

}  // namespace
}  // namespace trainshim::test
