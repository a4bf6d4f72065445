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
    const uint64_t bytes = segment_bytes(rings, capacity, 4);
    memory_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    std::memset(memory_, 0, bytes);
    header()->ring_count = rings;
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

}  // namespace
}  // namespace trainshim::shim
