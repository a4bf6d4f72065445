// SegmentReader's two-phase reading: drain() hands records out, release() gives their slots back,
// and a reader replacing a dead one resumes where the records it had committed end.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/recorder.hpp"
#include "segment_reader.hpp"
#include "trainshim/names.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::collector {
namespace {

namespace bip = boost::interprocess;

constexpr uint32_t kRings = 2;
constexpr uint32_t kCapacity = 16;
constexpr uint32_t kSideCapacity = 4;

// A live producer's segment in /dev/shm, written through the ring API as the shim writes it.
class Segment {
 public:
  explicit Segment(uint32_t capacity = kCapacity) : Segment(kRings, capacity, capacity) {}
  Segment(uint32_t rings, uint32_t first_capacity, uint32_t capacity) {
    static int counter = 0;
    name_ = segment_name(getuid(), "reader_" + std::to_string(getpid()) + "_" + std::to_string(++counter), getpid());
    bip::shared_memory_object::remove(name_.c_str());
    bip::permissions owner_only;
    owner_only.set_permissions(0600);
    bip::shared_memory_object shm(bip::create_only, name_.c_str(), bip::read_write, owner_only);
    shm.truncate(bip::offset_t(segment_bytes(rings, first_capacity, capacity, kSideCapacity)));
    region_ = bip::mapped_region(shm, bip::read_write);
    // The producer's liveness lock (an open-file-description lock stands for its POSIX one).
    liveness_fd_ = open((std::string(kShmDir) + "/" + name_).c_str(), O_RDWR | O_CLOEXEC);
    struct flock lock {};
    lock.l_type = F_RDLCK;
    lock.l_len = 1;
    EXPECT_EQ(fcntl(liveness_fd_, F_OFD_SETLK, &lock), 0);
    SegmentHeader* h = header();
    init_segment_header(*h, rings, first_capacity, capacity, kSideCapacity,
                        {.pid = getpid(), .clock_kind = ClockKind::Monotonic});
    h->producer_state.store(static_cast<uint32_t>(ProducerState::Live), std::memory_order_release);
  }
  ~Segment() {
    producer_exits();
    bip::shared_memory_object::remove(name_.c_str());
  }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  void producer_exits() {
    if (liveness_fd_ >= 0) close(liveness_fd_);
    liveness_fd_ = -1;
  }

  const std::string& name() const { return name_; }
  SegmentHeader* header() { return static_cast<SegmentHeader*>(region_.get_address()); }
  RingView ring(uint32_t i) { return ring_of(header(), i); }
  SideRingView side() { return side_ring_of(header()); }

  bool push(uint32_t ring_index, uint64_t value) {
    EventRecord r{};
    r.begin_ticks = value;
    r.end_ticks = value;
    r.detail = value;
    r.api = static_cast<uint16_t>(Api::cudaMemcpyAsync);
    return ring(ring_index).push(r);
  }
  bool push_side(uint32_t id) {
    SideRecord r{};
    r.kind = static_cast<uint16_t>(SideKind::String);
    r.count = 1;
    r.id = id;
    r.text[0] = 'x';
    return side().push(r);
  }

 private:
  std::string name_;
  bip::mapped_region region_;
  int liveness_fd_ = -1;
};

// The `detail` of every record drained, ring after ring.
std::vector<uint64_t> drain_values(SegmentReader& reader, bool producer_gone = false) {
  std::vector<uint64_t> values;
  reader.drain([&](const EventRecord& r) { values.push_back(r.detail); }, producer_gone);
  return values;
}

std::vector<uint32_t> drain_side_ids(SegmentReader& reader) {
  std::vector<uint32_t> ids;
  reader.drain_side([&](const SideRecord& r) { ids.push_back(r.id); }, false);
  return ids;
}

std::vector<uint64_t> range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> v;
  for (uint64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

TEST(SegmentReader, DrainedRecordsKeepTheirSlotsUntilReleased) {
  Segment seg;
  for (uint64_t v = 0; v < kCapacity; ++v) ASSERT_TRUE(seg.push(0, v));
  SegmentReader reader(seg.name());
  EXPECT_EQ(drain_values(reader), range(0, kCapacity));
  EXPECT_EQ(drain_values(reader), std::vector<uint64_t>{}) << "handed out once";

  // Not released yet: the producer counts a full ring instead of overwriting what was handed out.
  for (uint64_t v = 100; v < 104; ++v) EXPECT_FALSE(seg.push(0, v));
  EXPECT_EQ(reader.dropped_ring_full(), 4u);
  EXPECT_EQ(seg.ring(0).tail(), 0u);

  reader.release();
  EXPECT_EQ(seg.ring(0).tail(), kCapacity);
  for (uint64_t v = 200; v < 204; ++v) EXPECT_TRUE(seg.push(0, v));
  EXPECT_EQ(drain_values(reader), range(200, 204));
  EXPECT_EQ(reader.dropped_ring_full(), 4u);
}

TEST(SegmentReader, SideRecordsKeepTheirSlotsUntilReleased) {
  Segment seg;
  for (uint32_t id = 1; id <= kSideCapacity; ++id) ASSERT_TRUE(seg.push_side(id));
  SegmentReader reader(seg.name());
  EXPECT_EQ(drain_side_ids(reader), (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_FALSE(seg.push_side(5));
  EXPECT_EQ(reader.dropped_side_full(), 1u);
  reader.release();
  EXPECT_TRUE(seg.push_side(6));
  EXPECT_EQ(drain_side_ids(reader), std::vector<uint32_t>{6});
}

TEST(SegmentReader, ReleasesWorkAcrossLaps) {
  Segment seg;
  SegmentReader reader(seg.name());
  std::vector<uint64_t> seen;
  uint64_t pushed = 0;
  // Batches of 1..8 records, so that head, cursor and tail cross every slot on many laps; two
  // batches at most between releases, so that the ring never fills.
  for (int batch = 0; pushed < 1000; ++batch) {
    for (uint64_t n = uint64_t(batch % (kCapacity / 2)) + 1; n > 0 && pushed < 1000; --n)
      ASSERT_TRUE(seg.push(1, pushed++));
    for (uint64_t v : drain_values(reader)) seen.push_back(v);
    if (batch % 2 == 1) reader.release();
  }
  reader.release();
  EXPECT_EQ(seen, range(0, 1000));
  EXPECT_EQ(reader.dropped_ring_full(), 0u);
  EXPECT_EQ(seg.ring(1).tail(), 1000u);
  EXPECT_EQ(reader.positions().rings, (std::vector<uint64_t>{0, 1000}));
}

TEST(SegmentReader, AReaderResumingAtCommittedPositionsSeesEachRecordOnce) {
  Segment seg;
  for (uint64_t v = 0; v < 10; ++v) ASSERT_TRUE(seg.push(0, v));
  for (uint64_t v = 50; v < 53; ++v) ASSERT_TRUE(seg.push(1, v));
  for (uint32_t id = 1; id <= 2; ++id) ASSERT_TRUE(seg.push_side(id));
  SegmentReader::Positions committed;
  {
    // The first collector drains and commits, then dies before releasing anything.
    SegmentReader first(seg.name());
    EXPECT_EQ(drain_values(first), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 50, 51, 52}));
    EXPECT_EQ(drain_side_ids(first), (std::vector<uint32_t>{1, 2}));
    committed = first.positions();
  }
  EXPECT_EQ(committed.rings, (std::vector<uint64_t>{10, 3}));
  EXPECT_EQ(committed.side, 2u);
  for (uint64_t v = 10; v < 13; ++v) ASSERT_TRUE(seg.push(0, v));
  ASSERT_TRUE(seg.push_side(3));

  SegmentReader second(seg.name());
  EXPECT_EQ(second.positions().rings, (std::vector<uint64_t>{0, 0})) << "a new reader starts at the tails";
  second.resume(committed);
  // What the first one committed is released at once: the producer has its room back.
  EXPECT_EQ(seg.ring(0).tail(), 10u);
  EXPECT_EQ(seg.ring(1).tail(), 3u);
  EXPECT_EQ(seg.side().tail(), 2u);
  EXPECT_EQ(drain_values(second), (std::vector<uint64_t>{10, 11, 12}));
  EXPECT_EQ(drain_side_ids(second), std::vector<uint32_t>{3});
  EXPECT_EQ(second.positions().rings, (std::vector<uint64_t>{13, 3}));
  EXPECT_EQ(second.positions().side, 3u);
}

TEST(SegmentReader, ResumeKeepsUntrustedPositionsWithinTheRing) {
  Segment seg;
  for (uint64_t v = 0; v < 6; ++v) ASSERT_TRUE(seg.push(0, v));
  for (uint64_t v = 0; v < 4; ++v) ASSERT_TRUE(seg.push(1, v));
  {
    SegmentReader first(seg.name());
    drain_values(first);
    first.release();  // tails at 6 and 4
  }
  for (uint64_t v = 6; v < 9; ++v) ASSERT_TRUE(seg.push(0, v));
  for (uint64_t v = 4; v < 6; ++v) ASSERT_TRUE(seg.push(1, v));

  SegmentReader reader(seg.name());
  // Ring 0: below the tail, nothing is skipped; ring 1: past the head, it stops at the head; an
  // extra ring is ignored; the side ring, past everything, stays empty.
  reader.resume({{2, UINT64_MAX, 7}, UINT64_MAX});
  EXPECT_EQ(seg.ring(0).tail(), 6u);
  EXPECT_EQ(seg.ring(1).tail(), 6u);
  EXPECT_EQ(seg.side().tail(), 0u);
  EXPECT_EQ(drain_values(reader), (std::vector<uint64_t>{6, 7, 8}));
  EXPECT_EQ(reader.positions().rings, (std::vector<uint64_t>{9, 6}));

  SegmentReader short_list(seg.name());
  short_list.resume({{}, 0});
  EXPECT_EQ(short_list.positions().rings, (std::vector<uint64_t>{6, 6})) << "no positions: nothing skipped";
}

TEST(SegmentReader, UnpublishedSlotWaitsForALiveProducerAndIsCountedOnceItIsGone) {
  Segment seg;
  ASSERT_TRUE(seg.push(0, 1));
  // A producer claims position 1 and stops before publishing it.
  uint64_t mark = 0;
  ASSERT_NE(seg.ring(0).claim(mark), nullptr);
  ASSERT_TRUE(seg.push(0, 3));

  SegmentReader reader(seg.name());
  // A replacing reader told that all three were committed stops at the unfinished one.
  reader.resume({{3, 0}, 0});
  EXPECT_EQ(reader.positions().rings, (std::vector<uint64_t>{1, 0}));
  EXPECT_EQ(seg.ring(0).tail(), 1u);

  const std::vector<uint64_t> nothing;
  EXPECT_EQ(drain_values(reader), nothing);
  seg.producer_exits();
  DrainCounts counts;
  std::vector<uint64_t> values;
  counts = reader.drain([&](const EventRecord& r) { values.push_back(r.detail); }, true);
  EXPECT_EQ(counts.unpublished, 1u);
  EXPECT_EQ(counts.records, 1u);
  EXPECT_EQ(values, std::vector<uint64_t>{3});
  reader.release();
  EXPECT_EQ(seg.ring(0).tail(), 3u);
  // The given-up slot is free again on the next lap.
  for (uint64_t v = 10; v < 10 + kCapacity; ++v) EXPECT_TRUE(seg.push(0, v));
  EXPECT_EQ(drain_values(reader, true), range(10, 10 + kCapacity));
}

// The collector reads a busy ring up to kReaderLag slots before its head, where the producer may
// still be writing, and the rest once the head stood still for a pass, or its producer is gone.
TEST(SegmentReader, ReaderStaysBehindAMovingHeadUntilItStops) {
  static_assert(SegmentReader::kReaderLag == 64 && SegmentReader::kLagRingSlots == 1024);
  Segment seg(1024);
  SegmentReader reader(seg.name());
  for (uint64_t v = 0; v < 100; ++v) ASSERT_TRUE(seg.push(0, v));
  EXPECT_EQ(drain_values(reader), range(0, 36));
  EXPECT_EQ(drain_values(reader), range(36, 100)) << "the head stood still since the last drain";
  EXPECT_EQ(drain_values(reader), std::vector<uint64_t>{});

  for (uint64_t v = 100; v < 110; ++v) ASSERT_TRUE(seg.push(0, v));
  EXPECT_EQ(drain_values(reader), std::vector<uint64_t>{}) << "all ten within the lag";
  for (uint64_t v = 110; v < 120; ++v) ASSERT_TRUE(seg.push(0, v));
  for (uint64_t v = 0; v < 3; ++v) ASSERT_TRUE(seg.push(1, v));
  seg.producer_exits();
  std::vector<uint64_t> expected = range(100, 120);
  for (uint64_t v = 0; v < 3; ++v) expected.push_back(v);
  EXPECT_EQ(drain_values(reader, true), expected) << "a gone producer's rings are read to their heads";

  // A segment opened with records in it has them read at once (nothing was released).
  for (uint64_t v = 120; v < 200; ++v) ASSERT_TRUE(seg.push(0, v));
  SegmentReader late(seg.name());
  expected = range(0, 200);
  for (uint64_t v = 0; v < 3; ++v) expected.push_back(v);
  EXPECT_EQ(drain_values(late), expected);
}

}  // namespace
}  // namespace trainshim::collector

namespace trainshim::collector {
namespace {

// A geometry shaped like the shim's default (8 rings, the first larger: 65,536 records, the others 16,384),
// written by the shim's recorder and read back by the collector's reader: the first thread to
// record takes ring 0 and fills it past what a 16,384-record ring holds; the fourth thread takes
// ring 3 and overfills it. Every record comes back from the ring it was written to, and the
// overflow is counted, not stored.
TEST(SegmentReader, RecordsOfTheLargerFirstRingAndOfAnotherRingRoundTrip) {
  constexpr uint32_t kFirst = 65536, kOthers = 16384;
  constexpr uint64_t kOnFirst = 40000, kOnFourth = kOthers + 100;
  Segment seg(8, kFirst, kOthers);
  // The header, ring 0, rings 1-7, the side ring of kSideCapacity.
  ASSERT_EQ(seg.header()->segment_bytes, 640u + (192u + 65536u * 96u) + 7u * (192u + 16384u * 96u) + 192u + 4u * 1032u);
  shim::Recorder recorder(seg.header());
  auto record = [&](uint64_t from, uint64_t count) {
    for (uint64_t v = from; v < from + count; ++v)
      recorder.record(shim::thread_state(), [v](EventRecord& r) {
        r = EventRecord{};
        r.api = static_cast<uint16_t>(Api::cudaMemcpyAsync);
        r.begin_ticks = v;
        r.end_ticks = v;
        r.detail = v;
      });
  };
  // Each thread keeps its ring until the last one has recorded, so that each takes the next ring.
  std::atomic<int> bound{0};
  std::atomic<bool> finish{false};
  std::vector<std::thread> threads;
  const uint64_t firsts[] = {1'000'000, 2'000'000, 3'000'000, 4'000'000};
  const uint64_t counts[] = {kOnFirst, 1, 1, kOnFourth};
  for (int t = 0; t < 4; ++t) {
    while (bound.load() != t) std::this_thread::yield();
    threads.emplace_back([&, t] {
      record(firsts[t], counts[t]);
      bound.fetch_add(1);
      while (!finish.load()) std::this_thread::yield();
    });
  }
  while (bound.load() != 4) std::this_thread::yield();
  finish = true;
  for (auto& thread : threads) thread.join();

  EXPECT_EQ(seg.ring(0).capacity(), kFirst);
  EXPECT_EQ(seg.ring(3).capacity(), kOthers);
  SegmentReader reader(seg.name());
  EXPECT_EQ(reader.geometry().first_ring_capacity, kFirst);
  EXPECT_EQ(reader.geometry().ring_capacity, kOthers);
  std::vector<std::vector<uint64_t>> by_thread(4);
  reader.drain([&](const EventRecord& r) { by_thread[r.detail / 1'000'000 - 1].push_back(r.detail); }, false);
  EXPECT_EQ(by_thread[0], range(firsts[0], firsts[0] + kOnFirst)) << "ring 0 holds more than the others";
  EXPECT_EQ(by_thread[1], range(firsts[1], firsts[1] + 1));
  EXPECT_EQ(by_thread[2], range(firsts[2], firsts[2] + 1));
  EXPECT_EQ(by_thread[3], range(firsts[3], firsts[3] + kOthers)) << "ring 3 holds 16,384";
  EXPECT_EQ(reader.dropped_ring_full(), 100u);
  const std::vector<uint64_t> expected_positions = {kOnFirst, 1, 1, kOthers, 0, 0, 0, 0};
  EXPECT_EQ(reader.positions().rings, expected_positions);
  reader.release();
  EXPECT_EQ(seg.ring(0).tail(), kOnFirst);
  EXPECT_EQ(seg.ring(3).tail(), kOthers);
}

// Why a segment cannot be read travels as a type: the collector retries a young segment by its
// HeaderProblem, never by the message's text.
SegmentError open_error(const std::string& name) {
  try {
    SegmentReader reader(name);
  } catch (const SegmentError& e) {
    return e;
  }
  ADD_FAILURE() << name << " opened";
  return SegmentError(HeaderProblem::Ok);
}

TEST(SegmentReader, ASegmentNotYetPublishedIsATypedYoungError) {
  Segment seg;
  seg.header()->producer_state.store(0);
  const SegmentError e = open_error(seg.name());
  EXPECT_EQ(e.reason(), SegmentError::Reason::BadHeader);
  EXPECT_EQ(e.header_problem(), HeaderProblem::NotPublished);
  EXPECT_TRUE(e.young());
  EXPECT_EQ(std::string(e.what()), "segment not yet published by its producer");
}

TEST(SegmentReader, ASegmentWithABadMagicIsATypedErrorThatIsNotYoung) {
  Segment seg;
  seg.header()->magic = 1;
  const SegmentError e = open_error(seg.name());
  EXPECT_EQ(e.reason(), SegmentError::Reason::BadHeader);
  EXPECT_EQ(e.header_problem(), HeaderProblem::BadMagic);
  EXPECT_FALSE(e.young());
}

TEST(SegmentReader, ASegmentSmallerThanAHeaderIsYoungAndOneOpenToOthersIsUntrusted) {
  const std::string tiny = segment_name(getuid(), "reader_tiny_" + std::to_string(getpid()), getpid());
  {
    bip::permissions owner_only;
    owner_only.set_permissions(0600);
    bip::shared_memory_object shm(bip::create_only, tiny.c_str(), bip::read_write, owner_only);
    shm.truncate(16);
  }
  const SegmentError small = open_error(tiny);
  EXPECT_EQ(small.header_problem(), HeaderProblem::TooSmall);
  EXPECT_TRUE(small.young());
  bip::shared_memory_object::remove(tiny.c_str());

  Segment seg;
  ASSERT_EQ(chmod((std::string(kShmDir) + "/" + seg.name()).c_str(), 0644), 0);
  const SegmentError open = open_error(seg.name());
  EXPECT_EQ(open.reason(), SegmentError::Reason::Untrusted);
  EXPECT_EQ(open.header_problem(), HeaderProblem::Ok);
  EXPECT_FALSE(open.young());
}

}  // namespace
}  // namespace trainshim::collector
