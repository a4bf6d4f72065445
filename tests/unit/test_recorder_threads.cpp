// The shim's Recorder with several threads recording at once while a consumer drains the rings,
// as the collector does. Built with ThreadSanitizer in CI (scripts/test): no data race between a
// producer filling its slot and the consumer reading it.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/recorder.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::shim {
namespace {

// A segment's memory as the shim lays it out, on the heap: header, rings, side ring.
class HeapSegment {
 public:
  HeapSegment(uint32_t rings, uint32_t capacity) {
    const uint64_t bytes = segment_bytes(rings, capacity, capacity, 4);
    memory_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    std::memset(memory_, 0, bytes);
    header()->ring_count = rings;
    header()->first_ring_capacity = capacity;
    header()->ring_capacity = capacity;
    header()->side_capacity = 4;
    header()->segment_bytes = bytes;
  }
  ~HeapSegment() { std::free(memory_); }
  HeapSegment(const HeapSegment&) = delete;
  HeapSegment& operator=(const HeapSegment&) = delete;
  SegmentHeader* header() { return static_cast<SegmentHeader*>(memory_); }

 private:
  void* memory_;
};

TEST(RecorderThreads, EveryRecordIsDrainedOrCountedAndEachThreadsOrderIsKept) {
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 20000;
  HeapSegment segment(2, 64);
  Recorder recorder(segment.header());

  std::atomic<int> running{kThreads};
  std::mutex tids_lock;
  std::set<uint32_t> producer_tids;
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&] {
      {
        std::lock_guard guard(tids_lock);
        producer_tids.insert(uint32_t(syscall(SYS_gettid)));
      }
      ThreadState& state = thread_state();
      for (uint64_t seq = 0; seq < kPerThread; ++seq)
        recorder.record(state, [seq](EventRecord& r) {
          r = EventRecord{};
          r.api = static_cast<uint16_t>(Api::cudaMemcpyAsync);
          r.begin_ticks = seq;
          r.end_ticks = seq + 1;
          r.detail = seq;
        });
      running.fetch_sub(1);
    });
  }

  std::map<uint32_t, int64_t> last_by_tid;
  uint64_t received = 0;
  bool in_order = true;
  for (bool drained = false; !drained;) {
    const bool producers_done = running.load() == 0;
    bool any = false;
    for (uint32_t i = 0; i < segment.header()->ring_count; ++i) {
      RingView ring = ring_of(segment.header(), i);
      EventRecord out{};
      const auto status = ring.pop(out);
      if (status != RingView::PopStatus::Record) continue;
      any = true;
      ++received;
      auto [it, fresh] = last_by_tid.try_emplace(out.tid, -1);
      if (int64_t(out.detail) <= it->second) in_order = false;
      it->second = int64_t(out.detail);
    }
    if (!any && producers_done) drained = true;
    if (!any) std::this_thread::yield();
  }
  for (auto& producer : producers) producer.join();

  uint64_t dropped = 0;
  for (uint32_t i = 0; i < segment.header()->ring_count; ++i) dropped += ring_of(segment.header(), i).dropped();
  EXPECT_EQ(received + dropped, kThreads * kPerThread);
  EXPECT_TRUE(in_order) << "a thread's records must arrive in the order it made them";
  for (const auto& [tid, last] : last_by_tid)
    EXPECT_TRUE(producer_tids.count(tid)) << "record stamped with thread id " << tid << ", no producer has it";
}

void record_value(Recorder& recorder, uint64_t value) {
  recorder.record(thread_state(), [value](EventRecord& r) {
    r = EventRecord{};
    r.api = static_cast<uint16_t>(Api::cudaMemcpyAsync);
    r.detail = value;
  });
}

// Runs `body` on a new thread to its end; returns that thread's kernel id.
template <class Body>
uint32_t on_thread(Body body) {
  uint32_t tid = 0;
  std::thread([&] {
    tid = uint32_t(syscall(SYS_gettid));
    body();
  }).join();
  return tid;
}

// A thread owns a ring from its first record to its exit; then the next thread takes the ring on
// from where its records end.
TEST(RecorderThreads, AThreadsRingIsGivenBackAtItsExit) {
  HeapSegment segment(3, 64);  // rings 0 and 1 are owned, ring 2 is shared
  Recorder recorder(segment.header());
  RingControl* ring0 = ring_of(segment.header(), 0).control();
  RingControl* ring1 = ring_of(segment.header(), 1).control();
  std::atomic<uint32_t> holder{0};
  std::atomic<bool> release_holder{false};
  std::thread holding([&] {
    record_value(recorder, 1);
    holder = uint32_t(syscall(SYS_gettid));
    while (!release_holder) std::this_thread::yield();
  });
  while (holder == 0) std::this_thread::yield();
  EXPECT_EQ(ring0->owner.load(), holder.load());

  uint32_t owner_while_running = 0;
  const uint32_t second = on_thread([&] {
    record_value(recorder, 2);
    record_value(recorder, 3);
    owner_while_running = ring1->owner.load();
  });
  EXPECT_EQ(owner_while_running, second);
  EXPECT_EQ(ring1->owner.load(), 0u) << "given back at the thread's exit";
  const uint32_t third = on_thread([&] { record_value(recorder, 4); });
  release_holder = true;
  holding.join();
  EXPECT_EQ(ring0->owner.load(), 0u);

  std::vector<std::pair<uint64_t, uint32_t>> ring1_records;
  EventRecord out{};
  for (RingView ring = ring_of(segment.header(), 1); ring.pop(out) == RingView::PopStatus::Record;)
    ring1_records.emplace_back(out.detail, out.tid);
  EXPECT_EQ(ring1_records, (std::vector<std::pair<uint64_t, uint32_t>>{{2, second}, {3, second}, {4, third}}));
  EXPECT_EQ(ring_of(segment.header(), 2).pending(), 0u) << "no thread had to share";
}

// A ring whose owner died without its thread's destructors running is taken over, not lost.
TEST(RecorderThreads, ARingHeldByAThreadThatIsGoneIsTakenOver) {
  HeapSegment segment(2, 64);
  Recorder recorder(segment.header());
  RingControl* ring0 = ring_of(segment.header(), 0).control();
  const uint32_t gone = on_thread([] {});
  ring0->owner.store(gone);
  const uint32_t taker = on_thread([&] { record_value(recorder, 5); });
  EventRecord out{};
  ASSERT_EQ(ring_of(segment.header(), 0).pop(out), RingView::PopStatus::Record);
  EXPECT_EQ(out.detail, 5u);
  EXPECT_EQ(out.tid, taker);
  EXPECT_EQ(ring_of(segment.header(), 1).pending(), 0u);
}

// The threads beyond the owned rings share the last one; all of their records arrive.
TEST(RecorderThreads, ThreadsBeyondTheRingsShareTheLastOne) {
  HeapSegment segment(2, 64);
  Recorder recorder(segment.header());
  std::atomic<bool> release_holder{false};
  std::atomic<bool> holding_ring{false};
  std::thread holder([&] {
    record_value(recorder, 1);
    holding_ring = true;
    while (!release_holder) std::this_thread::yield();
  });
  while (!holding_ring) std::this_thread::yield();
  std::vector<std::thread> sharing;
  for (uint64_t t = 0; t < 3; ++t) sharing.emplace_back([&recorder, t] { record_value(recorder, 10 + t); });
  for (auto& thread : sharing) thread.join();
  release_holder = true;
  holder.join();
  std::multiset<uint64_t> shared;
  EventRecord out{};
  for (RingView ring = ring_of(segment.header(), 1); ring.pop(out) == RingView::PopStatus::Record;)
    shared.insert(out.detail);
  EXPECT_EQ(shared, (std::multiset<uint64_t>{10, 11, 12}));
  EXPECT_EQ(ring_of(segment.header(), 0).pending(), 1u);
}

}  // namespace
}  // namespace trainshim::shim
