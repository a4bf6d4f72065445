// How much of /dev/shm a process's segment may take, and the rings it gets within that.
#include <gtest/gtest.h>

#include "core/segment.hpp"

namespace trainshim::shim {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20, kGiB = uint64_t{1} << 30;
constexpr SegmentGeometry kDefaults{8, 131072, 16384, 2048};

TEST(SegmentFit, AHostsDevShmLeavesTheDefaultsAsTheyAre) {
  // Half of a 24 GiB machine's memory, 11 GiB free: a quarter of it, or all but 4 GiB of the free.
  EXPECT_EQ(segment_budget({12 * kGiB, 11 * kGiB}, -1), 3 * kGiB);
  EXPECT_EQ(segment_budget({12 * kGiB, 11 * kGiB}, 8), 3 * kGiB / 8);
  SegmentGeometry fitted = kDefaults;
  ASSERT_TRUE(fit_segment(fitted, segment_budget({12 * kGiB, 11 * kGiB}, 8)));
  EXPECT_EQ(fitted.first_ring_events, 131072u);
  EXPECT_EQ(fitted.ring_events, 16384u);
  EXPECT_EQ(fitted.side_records, 2048u);
  EXPECT_EQ(fitted.bytes(), 25'708'864u);
  // A large /dev/shm mostly used by the program (a dataset kept there): 4 GiB are kept free, not half.
  EXPECT_EQ(segment_budget({500 * kGiB, 100 * kGiB}, -1), 96 * kGiB);
}

TEST(SegmentFit, DockersDefaultIsSharedByTheNodesRanksAndHalfOfItStaysFree) {
  // 64 MiB among 8 ranks: 2 MiB each, 16 MiB in all.
  EXPECT_EQ(segment_budget({64 * kMiB, 64 * kMiB}, 8), 2 * kMiB);
  SegmentGeometry fitted = kDefaults;
  ASSERT_TRUE(fit_segment(fitted, 2 * kMiB));
  // The largest part halved first: the first ring, the 7 others together, the side ring.
  EXPECT_EQ(fitted.rings, 8u);
  EXPECT_EQ(fitted.first_ring_events, 8192u);
  EXPECT_EQ(fitted.ring_events, 1024u);
  EXPECT_EQ(fitted.side_records, 512u);
  EXPECT_LE(fitted.bytes(), 2 * kMiB);
  // One rank, 48 MiB: a quarter, 12 MiB.
  EXPECT_EQ(segment_budget({48 * kMiB, 48 * kMiB}, -1), 12 * kMiB);
  fitted = kDefaults;
  ASSERT_TRUE(fit_segment(fitted, 12 * kMiB));
  EXPECT_EQ(fitted.first_ring_events, 32768u);
  EXPECT_EQ(fitted.ring_events, 8192u);
  EXPECT_EQ(fitted.side_records, 2048u);
  EXPECT_LE(fitted.bytes(), 12 * kMiB);
  // Ranks that already took their share leave less: never past half of /dev/shm in use.
  EXPECT_EQ(segment_budget({64 * kMiB, 33 * kMiB}, 1), 1 * kMiB);
  EXPECT_EQ(segment_budget({64 * kMiB, 30 * kMiB}, 1), 0u);
}

TEST(SegmentFit, RingsAreNotShrunkPastTheSmallestButRefused) {
  SegmentGeometry fitted = kDefaults;
  EXPECT_FALSE(fit_segment(fitted, segment_budget({1 * kMiB, 1 * kMiB}, -1)));
  SegmentGeometry smallest{8, kSmallestRingEvents, kSmallestRingEvents, kSmallestSideRecords};
  fitted = kDefaults;
  ASSERT_TRUE(fit_segment(fitted, smallest.bytes()));
  EXPECT_EQ(fitted.first_ring_events, kSmallestRingEvents);
  EXPECT_EQ(fitted.ring_events, kSmallestRingEvents);
  EXPECT_EQ(fitted.side_records, kSmallestSideRecords);
  fitted = kDefaults;
  EXPECT_FALSE(fit_segment(fitted, smallest.bytes() - 1));
}

}  // namespace
}  // namespace trainshim::shim
