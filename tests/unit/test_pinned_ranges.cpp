// PinnedRanges: the shim's table of page-locked host ranges, read lock-free on every copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "core/pinned_ranges.hpp"

namespace trainshim::shim {
namespace {

std::unique_ptr<PinnedRanges> make_table() { return std::make_unique<PinnedRanges>(); }

TEST(PinnedRanges, EmptyTableContainsNothing) {
  auto t = make_table();
  EXPECT_EQ(t->size(), 0u);
  EXPECT_FALSE(t->contains(0));
  EXPECT_FALSE(t->contains(0x1000));
  EXPECT_EQ(t->remove(0x1000), 0u);
}

TEST(PinnedRanges, BoundariesOfOneRange) {
  auto t = make_table();
  ASSERT_TRUE(t->add(0x10000, 0x1000));
  EXPECT_EQ(t->size(), 1u);
  EXPECT_FALSE(t->contains(0xFFFF));   // just before
  EXPECT_TRUE(t->contains(0x10000));   // first byte
  EXPECT_TRUE(t->contains(0x10800));   // inside
  EXPECT_TRUE(t->contains(0x10FFF));   // last byte
  EXPECT_FALSE(t->contains(0x11000));  // one past the end
  EXPECT_FALSE(t->contains(0x20000));
}

TEST(PinnedRanges, ZeroSizedRangeIsRefused) {
  auto t = make_table();
  EXPECT_FALSE(t->add(0x10000, 0));
  EXPECT_EQ(t->size(), 0u);
  EXPECT_FALSE(t->contains(0x10000));
}

TEST(PinnedRanges, RemoveReturnsSizeOnlyForAKnownBegin) {
  auto t = make_table();
  ASSERT_TRUE(t->add(0x10000, 0x1000));
  ASSERT_TRUE(t->add(0x30000, 0x2000));
  EXPECT_EQ(t->remove(0x10800), 0u);  // inside a range, not its beginning
  EXPECT_EQ(t->remove(0x20000), 0u);  // unknown
  EXPECT_EQ(t->remove(0x40000), 0u);  // beyond every range
  EXPECT_EQ(t->size(), 2u);
  EXPECT_EQ(t->remove(0x10000), 0x1000u);
  EXPECT_EQ(t->size(), 1u);
  EXPECT_FALSE(t->contains(0x10000));
  EXPECT_TRUE(t->contains(0x30000));
  EXPECT_EQ(t->remove(0x10000), 0u);  // already removed
  EXPECT_EQ(t->remove(0x30000), 0x2000u);
  EXPECT_EQ(t->size(), 0u);
  EXPECT_FALSE(t->contains(0x30000));
}

TEST(PinnedRanges, AdjacentRanges) {
  auto t = make_table();
  ASSERT_TRUE(t->add(0x2000, 0x1000));  // [0x2000, 0x3000)
  ASSERT_TRUE(t->add(0x1000, 0x1000));  // [0x1000, 0x2000)
  ASSERT_TRUE(t->add(0x3000, 0x1000));  // [0x3000, 0x4000)
  for (uintptr_t a : {0x1000, 0x1FFF, 0x2000, 0x2FFF, 0x3000, 0x3FFF}) EXPECT_TRUE(t->contains(a)) << a;
  EXPECT_FALSE(t->contains(0xFFF));
  EXPECT_FALSE(t->contains(0x4000));
  EXPECT_EQ(t->remove(0x2000), 0x1000u);
  EXPECT_TRUE(t->contains(0x1FFF));
  EXPECT_FALSE(t->contains(0x2000));
  EXPECT_FALSE(t->contains(0x2FFF));
  EXPECT_TRUE(t->contains(0x3000));
}

TEST(PinnedRanges, PartlyOverlappingRanges) {
  auto t = make_table();
  ASSERT_TRUE(t->add(1000, 1000));  // [1000, 2000)
  ASSERT_TRUE(t->add(1500, 1000));  // [1500, 2500)
  EXPECT_TRUE(t->contains(1200));
  EXPECT_TRUE(t->contains(1700));
  EXPECT_TRUE(t->contains(2200));
  EXPECT_FALSE(t->contains(2500));
  EXPECT_FALSE(t->contains(999));
  EXPECT_EQ(t->remove(1500), 1000u);
  EXPECT_TRUE(t->contains(1700));
  EXPECT_FALSE(t->contains(2200));
}

TEST(PinnedRanges, ThousandRangesInRandomOrder) {
  auto t = make_table();
  std::vector<uintptr_t> begins(1000);
  for (std::size_t i = 0; i < begins.size(); ++i) begins[i] = 0x100000 + i * 0x10000;  // 64 KiB apart
  std::mt19937_64 random(12345);
  std::shuffle(begins.begin(), begins.end(), random);
  for (std::size_t i = 0; i < begins.size(); ++i) ASSERT_TRUE(t->add(begins[i], 0x1000 + (begins[i] >> 16) % 7));
  EXPECT_EQ(t->size(), 1000u);
  for (uintptr_t b : begins) {
    const uint64_t size = 0x1000 + (b >> 16) % 7;
    ASSERT_TRUE(t->contains(b)) << b;
    ASSERT_TRUE(t->contains(b + size - 1)) << b;
    ASSERT_FALSE(t->contains(b + size)) << b;
    ASSERT_FALSE(t->contains(b - 1)) << b;
  }
  // Remove every other one (in another random order) and check both halves.
  std::vector<uintptr_t> removed(begins.begin(), begins.begin() + 500);
  std::shuffle(removed.begin(), removed.end(), random);
  for (uintptr_t b : removed) ASSERT_EQ(t->remove(b), 0x1000 + (b >> 16) % 7);
  EXPECT_EQ(t->size(), 500u);
  for (std::size_t i = 0; i < begins.size(); ++i) EXPECT_EQ(t->contains(begins[i] + 1), i >= 500) << i;
}

TEST(PinnedRanges, GenerationChangesOnEveryChange) {
  auto t = make_table();
  const uint64_t g0 = t->generation();
  ASSERT_TRUE(t->add(0x1000, 0x100));
  const uint64_t g1 = t->generation();
  EXPECT_NE(g1, g0);
  EXPECT_EQ(g1 % 2, 0u);  // no change in progress
  EXPECT_TRUE(t->contains(0x1000));
  EXPECT_EQ(t->generation(), g1);  // reading changes nothing
  EXPECT_EQ(t->remove(0x1000), 0x100u);
  const uint64_t g2 = t->generation();
  EXPECT_NE(g2, g1);
  EXPECT_EQ(t->remove(0x1000), 0u);  // nothing removed: nothing changed
  EXPECT_EQ(t->generation(), g2);
  EXPECT_FALSE(t->add(0x1000, 0));
  EXPECT_EQ(t->generation(), g2);
}

TEST(PinnedRanges, FullTableRefusesMore) {
  auto t = make_table();
  for (std::size_t i = 0; i < PinnedRanges::kCapacity; ++i) ASSERT_TRUE(t->add(0x100000 + i * 0x100, 0x80)) << i;
  EXPECT_EQ(t->size(), PinnedRanges::kCapacity);
  const uint64_t g = t->generation();
  EXPECT_FALSE(t->add(0x10, 0x10));
  EXPECT_EQ(t->generation(), g);
  EXPECT_FALSE(t->contains(0x10));
  EXPECT_TRUE(t->contains(0x100000));
  EXPECT_TRUE(t->contains(0x100000 + (PinnedRanges::kCapacity - 1) * 0x100 + 0x7F));
  // Room again after a removal.
  EXPECT_EQ(t->remove(0x100000), 0x80u);
  EXPECT_TRUE(t->add(0x10, 0x10));
  EXPECT_TRUE(t->contains(0x10));
}

TEST(PinnedRanges, ResetAfterForkEmptiesAndBumpsGeneration) {
  auto t = make_table();
  ASSERT_TRUE(t->add(0x1000, 0x100));
  const uint64_t g = t->generation();
  t->reset_after_fork();
  EXPECT_EQ(t->size(), 0u);
  EXPECT_FALSE(t->contains(0x1000));
  EXPECT_NE(t->generation(), g);
  EXPECT_EQ(t->generation() % 2, 0u);
  EXPECT_TRUE(t->add(0x1000, 0x100));  // the writer's lock is usable
  EXPECT_TRUE(t->contains(0x1000));
}

// Readers never take the writer's lock. A reader that overlaps a change retries; after 64 tries it
// may answer "not known here" (false) on purpose, so a miss is tolerated only while a change
// overlapped that very call. What must never happen: a miss while no change overlapped the call,
// or a hit on an address no range ever covered (a torn read).
TEST(PinnedRanges, ConcurrentReadersWhileAWriterChangesTheTable) {
  auto t = make_table();
  constexpr uintptr_t kFixed = 0x5000'0000;
  constexpr uint64_t kFixedSize = 0x10000;
  ASSERT_TRUE(t->add(kFixed, kFixedSize));
  // Churned ranges lie both below and above the fixed one, so every change shifts it in the array.
  std::vector<uintptr_t> churn;
  for (int i = 0; i < 64; ++i) churn.push_back(0x1000'0000 + uintptr_t(i) * 0x10'0000);
  for (int i = 0; i < 64; ++i) churn.push_back(0x9000'0000 + uintptr_t(i) * 0x10'0000);
  constexpr uint64_t kChurnSize = 0x1000;

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> misses_while_stable{0}, false_hits{0}, reads{0};
  auto reader = [&] {
    uint64_t local_reads = 0;
    while (!stop.load(std::memory_order_relaxed) || local_reads < 1000) {
      const uint64_t before = t->generation();
      const bool fixed_found = t->contains(kFixed + kFixedSize / 2);
      const uint64_t after = t->generation();
      if (!fixed_found && before == after && before % 2 == 0) misses_while_stable.fetch_add(1);
      // Gaps between churned ranges and right after the fixed one: never pinned.
      if (t->contains(0x1000'0000 + kChurnSize) || t->contains(kFixed + kFixedSize) ||
          t->contains(0x9000'0000 + 0x8'0000))
        false_hits.fetch_add(1);
      ++local_reads;
    }
    reads.fetch_add(local_reads);
  };
  std::thread r1(reader), r2(reader);
  std::mt19937 random(7);
  for (int round = 0; round < 200; ++round) {
    std::shuffle(churn.begin(), churn.end(), random);
    for (uintptr_t b : churn) ASSERT_TRUE(t->add(b, kChurnSize));
    std::shuffle(churn.begin(), churn.end(), random);
    for (uintptr_t b : churn) ASSERT_EQ(t->remove(b), kChurnSize);
  }
  stop.store(true);
  r1.join();
  r2.join();
  EXPECT_EQ(misses_while_stable.load(), 0u);
  EXPECT_EQ(false_hits.load(), 0u);
  EXPECT_GE(reads.load(), 2000u);
  EXPECT_EQ(t->size(), 1u);
  EXPECT_TRUE(t->contains(kFixed));
}

}  // namespace
}  // namespace trainshim::shim

namespace trainshim::shim {
namespace {

TEST(PinnedRangesFind, GivesTheRangeHoldingAnAddressAndLeavesTheOutputsAloneOtherwise) {
  auto table = std::make_unique<PinnedRanges>();
  ASSERT_TRUE(table->add(0x1000, 0x100));
  ASSERT_TRUE(table->add(0x3000, 0x200));
  uintptr_t begin = 7, end = 9;
  EXPECT_TRUE(table->find(0x30ff, begin, end));
  EXPECT_EQ(begin, 0x3000u);
  EXPECT_EQ(end, 0x3200u);
  begin = 7;
  end = 9;
  EXPECT_FALSE(table->find(0x1100, begin, end)) << "one past the end of the first range";
  EXPECT_FALSE(table->find(0x2000, begin, end));
  EXPECT_FALSE(table->find(0x0fff, begin, end));
  EXPECT_EQ(begin, 7u);
  EXPECT_EQ(end, 9u);
}

}  // namespace
}  // namespace trainshim::shim
