// The collector's bound on the sampler's rows: TRAINSHIM_SAMPLE_ROWS (the collector is started with
// the job's environment) or its --sample-rows, refused with what is allowed when it is no count;
// and the on-demand collector's idle time, TRAINSHIM_COLLECTOR_IDLE_S.
#include <gtest/gtest.h>
#include <signal.h>

#include <future>
#include <string>

#include "harness.hpp"

namespace trainshim::test {
namespace {

std::string collector() { return std::string(Paths::bin) + "/trainshim-collector"; }

TEST(CollectorOptions, ASampleRowsValueThatIsNoCountIsRefusedWithWhatIsAllowed) {
  Scratch s;
  for (const char* value : {"-1", "1M", "1000000001"}) {
    SCOPED_TRACE(value);
    const auto collect = run(std::string("TRAINSHIM_SAMPLE_ROWS=") + value + " " + collector() + " --job " + s.job +
                             " --out " + s.db() + " --exit-when-idle 0.2 2>&1");
    EXPECT_EQ(collect.exit_code, 2);
    EXPECT_EQ(collect.out, std::string("trainshim-collector: TRAINSHIM_SAMPLE_ROWS=") + value +
                               " is not a number of rows from 0 to 1000000000\n");
  }
  const auto flag = run(collector() + " --job " + s.job + " --out " + s.db() + " --sample-rows 1000000001 2>&1");
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.out.find("--sample-rows"), std::string::npos) << flag.out;
}

// The flag wins over the environment: a collector told --sample-rows 0 runs where the environment's
// value would have been refused, and exits once idle.
TEST(CollectorOptions, TheSampleRowsFlagWinsOverTheEnvironment) {
  Scratch s;
  const auto collect = run("TRAINSHIM_SAMPLE_ROWS=junk " + collector() + " --job " + s.job + " --out " + s.db() +
                           " --exit-when-idle 0.2 --sample-rows 0 2>&1");
  EXPECT_EQ(collect.exit_code, 0) << collect.out;
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM samples"), 0);
}

// The shim passes --exit-when-idle without a value: TRAINSHIM_COLLECTOR_IDLE_S sets the time. Two
// collectors with no producer, told 0.2 s and 600 s: the first exits while the second still runs.
TEST(CollectorOptions, TheOnDemandCollectorsIdleTimeComesFromTheEnvironment) {
  Scratch brief, patient;
  const auto patient_collector = std::async(std::launch::async, [&] {
    return run("TRAINSHIM_COLLECTOR_IDLE_S=600 " + collector() + " --job " + patient.job + " --out " + patient.db() +
               " --exit-when-idle 2>&1");
  });
  ASSERT_TRUE(eventually([&] { return !collectors_of(patient.job).empty(); }));
  const auto collect = run("TRAINSHIM_COLLECTOR_IDLE_S=0.2 " + collector() + " --job " + brief.job + " --out " +
                           brief.db() + " --exit-when-idle 2>&1");
  EXPECT_EQ(collect.exit_code, 0) << collect.out;
  EXPECT_EQ(collectors_of(patient.job).size(), 1u) << "the collector told 600 s exited with the one told 0.2 s";
  for (const pid_t pid : collectors_of(patient.job)) kill(pid, SIGTERM);
  EXPECT_EQ(patient_collector.wait_for(std::chrono::seconds(60)), std::future_status::ready);
}

TEST(CollectorOptions, AnIdleTimeThatIsNoNumberOfSecondsIsRefused) {
  Scratch s;
  for (const char* value : {"nan", "0", "-1", "86401"}) {
    SCOPED_TRACE(value);
    const auto collect = run(std::string("TRAINSHIM_COLLECTOR_IDLE_S=") + value + " " + collector() + " --job " +
                             s.job + " --out " + s.db() + " --exit-when-idle 2>&1");
    EXPECT_EQ(collect.exit_code, 2);
    EXPECT_EQ(collect.out, std::string("trainshim-collector: TRAINSHIM_COLLECTOR_IDLE_S=") + value +
                               " is not a number of seconds above 0 and at most 86400\n");
  }
}

}  // namespace
}  // namespace trainshim::test
