// RingView: the multi-producer single-consumer ring shared by the shim and the collector.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "trainshim/ring.hpp"

namespace trainshim {
namespace {

// A ring laid out as in a segment: RingControl followed by its slots, zero-filled (an empty ring).
class HeapRing {
 public:
  explicit HeapRing(uint32_t capacity) : capacity_(capacity) {
    const std::size_t bytes = (ring_bytes(capacity) + 63) / 64 * 64;
    memory_ = static_cast<char*>(std::aligned_alloc(64, bytes));
    std::memset(memory_, 0, bytes);
  }
  ~HeapRing() { std::free(memory_); }
  HeapRing(const HeapRing&) = delete;
  HeapRing& operator=(const HeapRing&) = delete;

  RingControl* control() { return reinterpret_cast<RingControl*>(memory_); }
  Slot* slots() { return reinterpret_cast<Slot*>(memory_ + sizeof(RingControl)); }
  RingView view() { return RingView(control(), slots(), capacity_); }

 private:
  uint32_t capacity_;
  char* memory_;
};

EventRecord record_with(uint64_t value, uint32_t tid = 7) {
  EventRecord r{};
  r.begin_ticks = value;
  r.end_ticks = value + 1;
  r.bytes = value * 3;
  r.detail = value;
  r.tid = tid;
  r.api = static_cast<uint16_t>(Api::cudaMemcpyAsync);
  return r;
}

TEST(Ring, FreshRingIsEmpty) {
  HeapRing heap(8);
  RingView ring = heap.view();
  EventRecord out{};
  EXPECT_EQ(ring.pop(out), RingView::PopStatus::Empty);
  EXPECT_EQ(ring.pending(), 0u);
  EXPECT_EQ(ring.dropped(), 0u);
}

TEST(Ring, PopsInPushOrderWithFieldsPreserved) {
  HeapRing heap(8);
  RingView ring = heap.view();
  for (uint64_t v = 1; v <= 5; ++v) ASSERT_TRUE(ring.push(record_with(v, uint32_t(100 + v))));
  EXPECT_EQ(ring.pending(), 5u);
  for (uint64_t v = 1; v <= 5; ++v) {
    EventRecord out{};
    ASSERT_EQ(ring.pop(out), RingView::PopStatus::Record);
    EXPECT_EQ(out.detail, v);
    EXPECT_EQ(out.begin_ticks, v);
    EXPECT_EQ(out.end_ticks, v + 1);
    EXPECT_EQ(out.bytes, v * 3);
    EXPECT_EQ(out.tid, 100 + v);
    EXPECT_EQ(out.api, static_cast<uint16_t>(Api::cudaMemcpyAsync));
  }
  EventRecord out{};
  EXPECT_EQ(ring.pop(out), RingView::PopStatus::Empty);
  EXPECT_EQ(ring.pending(), 0u);
}

TEST(Ring, FullRingDropsAndCounts) {
  HeapRing heap(8);
  RingView ring = heap.view();
  for (uint64_t v = 0; v < 8; ++v) ASSERT_TRUE(ring.push(record_with(v)));
  EXPECT_FALSE(ring.push(record_with(100)));
  EXPECT_FALSE(ring.push(record_with(101)));
  EXPECT_EQ(ring.dropped(), 2u);
  EXPECT_EQ(ring.pending(), 8u);
  // The dropped records never appear; the ones that fit come out intact.
  for (uint64_t v = 0; v < 8; ++v) {
    EventRecord out{};
    ASSERT_EQ(ring.pop(out), RingView::PopStatus::Record);
    EXPECT_EQ(out.detail, v);
  }
  EventRecord out{};
  EXPECT_EQ(ring.pop(out), RingView::PopStatus::Empty);
  // Room again after the consumer caught up; the drop count stays.
  EXPECT_TRUE(ring.push(record_with(200)));
  ASSERT_EQ(ring.pop(out), RingView::PopStatus::Record);
  EXPECT_EQ(out.detail, 200u);
  EXPECT_EQ(ring.dropped(), 2u);
}

TEST(Ring, OneFreedSlotAdmitsExactlyOneMore) {
  HeapRing heap(8);
  RingView ring = heap.view();
  for (uint64_t v = 0; v < 8; ++v) ASSERT_TRUE(ring.push(record_with(v)));
  EventRecord out{};
  ASSERT_EQ(ring.pop(out), RingView::PopStatus::Record);
  EXPECT_TRUE(ring.push(record_with(8)));
  EXPECT_FALSE(ring.push(record_with(9)));
  EXPECT_EQ(ring.dropped(), 1u);
  for (uint64_t v = 1; v <= 8; ++v) {
    ASSERT_EQ(ring.pop(out), RingView::PopStatus::Record);
    EXPECT_EQ(out.detail, v);
  }
}

TEST(Ring, WrapsAroundOverManyLaps) {
  HeapRing heap(8);
  RingView ring = heap.view();
  uint64_t pushed = 0, popped = 0;
  // Batches of 1..8 records, so the positions of head and tail drift across every slot.
  for (int batch = 0; pushed < 1000; ++batch) {
    const uint64_t n = std::min<uint64_t>(uint64_t(batch % 8) + 1, 1000 - pushed);
    for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(ring.push(record_with(pushed++)));
    EventRecord out{};
    while (ring.pop(out) == RingView::PopStatus::Record) {
      ASSERT_EQ(out.detail, popped);
      ++popped;
    }
  }
  EXPECT_EQ(popped, 1000u);
  EXPECT_EQ(ring.dropped(), 0u);
  EXPECT_EQ(heap.control()->head.load(), 1000u);
  EXPECT_EQ(heap.control()->tail.load(), 1000u);
}

TEST(Ring, UnpublishedSlotIsReportedAndCanBeSkipped) {
  HeapRing heap(8);
  RingView ring = heap.view();
  ASSERT_TRUE(ring.push(record_with(1)));
  // A producer claims position 1 and dies before writing it.
  heap.control()->head.fetch_add(1);
  ASSERT_TRUE(ring.push(record_with(3)));
  EXPECT_EQ(ring.pending(), 3u);

  EventRecord out{};
  ASSERT_EQ(ring.pop(out), RingView::PopStatus::Record);
  EXPECT_EQ(out.detail, 1u);
  EXPECT_EQ(ring.pop(out), RingView::PopStatus::Unpublished);
  EXPECT_EQ(ring.pop(out), RingView::PopStatus::Unpublished);  // still waiting, nothing consumed
  EXPECT_EQ(ring.pending(), 2u);
  ring.skip_unpublished();
  EXPECT_EQ(ring.pending(), 1u);
  ASSERT_EQ(ring.pop(out), RingView::PopStatus::Record);
  EXPECT_EQ(out.detail, 3u);
  EXPECT_EQ(ring.pop(out), RingView::PopStatus::Empty);

  // The skipped slot is usable again on later laps.
  for (uint64_t v = 10; v < 30; ++v) {
    ASSERT_TRUE(ring.push(record_with(v)));
    ASSERT_EQ(ring.pop(out), RingView::PopStatus::Record);
    EXPECT_EQ(out.detail, v);
  }
  EXPECT_EQ(ring.dropped(), 0u);
}

// The owner's writer: plain stores, the consumer's tail read only when the ring looks full.
TEST(Ring, OwnedWriterDropsWhenFullAndResumesOnceTheConsumerReleases) {
  HeapRing heap(8);
  RingView ring = heap.view();
  OwnedRingWriter writer(ring);
  auto write = [&](uint64_t v) {
    Slot* slot = writer.claim();
    if (!slot) return false;
    slot->record = record_with(v);
    writer.publish(slot);
    return true;
  };
  for (uint64_t v = 0; v < 8; ++v) ASSERT_TRUE(write(v));
  EXPECT_FALSE(write(100));
  EXPECT_EQ(ring.dropped(), 1u);
  EventRecord out{};
  ASSERT_EQ(ring.read(0, out), RingView::PopStatus::Record);
  EXPECT_FALSE(write(101)) << "read but not released: still the producer's loss";
  ring.release(2);
  EXPECT_TRUE(write(8));
  EXPECT_TRUE(write(9));
  EXPECT_FALSE(write(102));
  EXPECT_EQ(ring.dropped(), 3u);
  EXPECT_EQ(heap.control()->head.load(), 10u);
  for (uint64_t v = 2; v < 10; ++v) {
    ASSERT_EQ(ring.pop(out), RingView::PopStatus::Record);
    EXPECT_EQ(out.detail, v);
  }
  EXPECT_EQ(ring.pop(out), RingView::PopStatus::Empty);
  // A second lap's slot states say which lap they hold: the first lap's stale ones are not read.
  EXPECT_FALSE(ring.complete(10));
}

TEST(Ring, ManyProducersOneConsumer) {
  constexpr int kProducers = 4;
  constexpr uint64_t kPerProducer = 10000;
  HeapRing heap(1024);
  RingView ring = heap.view();
  std::atomic<int> running{kProducers};
  std::vector<uint64_t> refused(kProducers, 0);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      RingView mine = heap.view();
      for (uint64_t seq = 0; seq < kPerProducer; ++seq)
        if (!mine.push(record_with(seq, uint32_t(p)))) ++refused[p];
      running.fetch_sub(1);
    });
  }
  std::vector<int64_t> last(kProducers, -1);
  uint64_t received = 0;
  bool order_ok = true;
  auto consume = [&](EventRecord& out) {
    ASSERT_LT(out.tid, uint32_t(kProducers));
    // Strictly increasing per producer: each (producer, seq) pair arrives once, in order.
    if (int64_t(out.detail) <= last[out.tid]) order_ok = false;
    last[out.tid] = int64_t(out.detail);
    ++received;
  };
  for (;;) {
    const bool producers_done = running.load() == 0;
    EventRecord out{};
    const auto status = ring.pop(out);
    if (status == RingView::PopStatus::Record) {
      consume(out);
    } else if (status == RingView::PopStatus::Empty && producers_done) {
      break;
    } else {
      std::this_thread::yield();  // empty, or a producer is between claim and publish
    }
  }
  for (auto& t : producers) t.join();
  EventRecord out{};
  EXPECT_EQ(ring.pop(out), RingView::PopStatus::Empty);
  uint64_t total_refused = 0;
  for (uint64_t r : refused) total_refused += r;
  EXPECT_TRUE(order_ok);
  EXPECT_EQ(ring.dropped(), total_refused);
  EXPECT_EQ(received + ring.dropped(), kProducers * kPerProducer);
  EXPECT_GT(received, 0u);
  EXPECT_EQ(ring.pending(), 0u);
}

}  // namespace
}  // namespace trainshim
