// Numbers and names as the CLI's reports write them (viewer-cli/text/format.hpp, collective_op_name).
#include <gtest/gtest.h>

#include <cstdint>

#include "diagnose/report_model.hpp"
#include "text/format.hpp"

namespace trainshim::cli {
namespace {

TEST(Format, WithThousands) {
  EXPECT_EQ(with_thousands(0), "0");
  EXPECT_EQ(with_thousands(999), "999");
  EXPECT_EQ(with_thousands(1000), "1,000");
  EXPECT_EQ(with_thousands(6200), "6,200");
  EXPECT_EQ(with_thousands(100000), "100,000");
  EXPECT_EQ(with_thousands(1234567), "1,234,567");
  EXPECT_EQ(with_thousands(-1234), "-1,234");
  EXPECT_EQ(with_thousands(-999), "-999");
}

TEST(Format, HumanBytes) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(1024), "1.0 KiB");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_bytes(1 << 20), "1.0 MiB");
  EXPECT_EQ(human_bytes((1 << 20) - 1), "1.0 MiB");
  EXPECT_EQ(human_bytes(1288490189), "1.2 GiB");
  EXPECT_EQ(human_bytes(int64_t(3) << 40), "3.0 TiB");
}

TEST(Format, HumanDuration) {
  EXPECT_EQ(human_duration(0), "0 ns");
  EXPECT_EQ(human_duration(999), "999 ns");
  EXPECT_EQ(human_duration(1500), "1.5 µs");
  EXPECT_EQ(human_duration(2'500'000), "2.5 ms");
  EXPECT_EQ(human_duration(999'999), "1.0 ms");
  EXPECT_EQ(human_duration(999'999'999), "1.00 s");
  EXPECT_EQ(human_duration(3'410'000'000), "3.41 s");
}

TEST(Format, CollectiveOpName) {
  EXPECT_EQ(collective_op_name("ncclAllReduce"), "all_reduce");
  EXPECT_EQ(collective_op_name("ncclReduceScatter"), "reduce_scatter");
  EXPECT_EQ(collective_op_name("ncclAllGather"), "all_gather");
  EXPECT_EQ(collective_op_name("ncclBroadcast"), "broadcast");
}

}  // namespace
}  // namespace trainshim::cli
