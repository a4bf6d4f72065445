// The collector's bound on the sampler's rows: TRAINSHIM_SAMPLE_ROWS (the collector is started with
// the job's environment) or its --sample-rows, refused with what is allowed when it is no count.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace trainshim::test
