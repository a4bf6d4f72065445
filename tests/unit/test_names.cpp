// Names derived from a job (common/trainshim/names.hpp): the job id as a file name, the shared-memory
// segments and the collector's lock.
#include <gtest/gtest.h>

#include <string>

#include "trainshim/names.hpp"

namespace trainshim {
namespace {

TEST(Names, SanitizeJob) {
  EXPECT_EQ(sanitize_job("a/b c-d"), "a_b_c_d");
  EXPECT_EQ(sanitize_job("Run_1.2"), "Run_1.2");
  EXPECT_EQ(sanitize_job("../x"), ".._x");
  EXPECT_EQ(sanitize_job(""), "job");
  EXPECT_EQ(sanitize_job(std::string(150, 'z')), std::string(100, 'z'));
}

TEST(Names, SegmentAndLockNames) {
  EXPECT_EQ(segment_prefix(1000, "run7"), "trainshim-1000-run7-");
  EXPECT_EQ(segment_name(1000, "run7", 4242), "trainshim-1000-run7-4242");
  EXPECT_EQ(collector_lock_path(1000, "run7"), "/dev/shm/trainshim-1000-run7.lock");
  // The lock file never looks like one of the job's segments.
  EXPECT_FALSE(collector_lock_path(1000, "run7").substr(9).starts_with(segment_prefix(1000, "run7")));
}

}  // namespace
}  // namespace trainshim
