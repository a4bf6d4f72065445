// The collector against real /dev/shm segments built here as the shim builds them.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <link.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstring>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "collector.hpp"
#include "core/recorder.hpp"
#include "segment_reader.hpp"
#include "temp_dir.hpp"
#include "trainshim/names.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::collector {
namespace {

namespace bip = boost::interprocess;
namespace fs = std::filesystem;

std::string unique_job() {
  static int counter = 0;
  return "unit_" + std::to_string(getpid()) + "_" + std::to_string(++counter);
}

bool shm_exists(const std::string& name) { return fs::exists(fs::path(kShmDir) / name); }

// As the shim creates its segments: anything else is not read (review §6).
bip::permissions owner_only() {
  bip::permissions p;
  p.set_permissions(0600);
  return p;
}

// A producer's segment, created in /dev/shm and removed again when the test ends.
class TestSegment {
 public:
  struct Options {
    pid_t pid = getpid();
    uint32_t rings = 2;
    uint32_t capacity = 16;
    bool publish = true;
    bool fill_header = true;
    bool producer_running = true;  // the liveness lock is held
    std::string suffix;            // the shim appends ".N" when an old segment holds its name

    Options& with_pid(pid_t p) {
      pid = p;
      return *this;
    }
    Options& with_suffix(std::string s) {
      suffix = std::move(s);
      return *this;
    }
    Options& unpublished() {
      publish = false;
      return *this;
    }
    Options& header_unwritten() {
      fill_header = false;
      return *this;
    }
    Options& producer_gone() {
      producer_running = false;
      return *this;
    }
  };

  TestSegment(const std::string& job, Options o) : options_(o), job_(job) {
    name_ = segment_name(getuid(), job, o.pid) + o.suffix;
    bip::shared_memory_object::remove(name_.c_str());
    bip::shared_memory_object shm(bip::create_only, name_.c_str(), bip::read_write, owner_only());
    shm.truncate(bip::offset_t(segment_bytes(o.rings, o.capacity, o.capacity, 4)));
    region_ = bip::mapped_region(shm, bip::read_write);
    geometry_ = {o.rings, o.capacity, o.capacity, 4, segment_bytes(o.rings, o.capacity, o.capacity, 4)};
    // The producer's lock is a process's own POSIX lock, which this process could not hold for
    // itself next to the collector under test (closing any descriptor of the file would drop it):
    // an open-file-description lock stands for it, and the collector's query sees either.
    if (o.producer_running) {
      liveness_fd_ = open(path().c_str(), O_RDWR | O_CLOEXEC);
      struct flock lock {};
      lock.l_type = F_RDLCK;
      lock.l_len = 1;
      EXPECT_EQ(fcntl(liveness_fd_, F_OFD_SETLK, &lock), 0);
    }
    if (o.fill_header) fill_header();
    if (o.publish) publish();
  }
  ~TestSegment() {
    producer_exits();
    bip::shared_memory_object::remove(name_.c_str());
  }
  TestSegment(const TestSegment&) = delete;
  TestSegment& operator=(const TestSegment&) = delete;

  void fill_header() {
    init_segment_header(*header(), options_.rings, options_.capacity, options_.capacity, 4,
                        {.pid = options_.pid,
                         .rank = 3,
                         .local_rank = 1,
                         .world_size = 8,
                         .clock_kind = ClockKind::Monotonic,  // ticks are nanoseconds
                         .anchor_monotonic_ns = 5000,
                         .anchor_ticks = 5000,
                         .anchor_realtime_ns = 1'700'000'000'000'000'000,
                         .host = "unit-host",
                         .job = job_,
                         .command = "python train.py --epochs 1"});
  }
  void publish() {
    header()->producer_state.store(static_cast<uint32_t>(ProducerState::Live), std::memory_order_release);
  }

  // As the kernel does when the producer exits: its lock goes.
  void producer_exits() {
    if (liveness_fd_ >= 0) close(liveness_fd_);
    liveness_fd_ = -1;
  }

  SegmentHeader* header() { return static_cast<SegmentHeader*>(region_.get_address()); }
  // Where the rings are, whatever the header says now.
  RingView ring(uint32_t i) { return ring_of(header(), geometry_, i); }
  SideRingView side_ring() { return side_ring_of(header(), geometry_); }
  RingControl* control(uint32_t i) {
    return reinterpret_cast<RingControl*>(reinterpret_cast<char*>(header()) + sizeof(SegmentHeader) +
                                          i * ring_bytes(options_.capacity));
  }
  const std::string& name() const { return name_; }
  std::string path() const { return std::string(kShmDir) + "/" + name_; }

 private:
  Options options_;
  std::string job_;
  std::string name_;
  bip::mapped_region region_;
  SegmentGeometry geometry_{};
  int liveness_fd_ = -1;
};

using Opts = TestSegment::Options;

EventRecord copy_record(uint64_t begin, uint64_t end, uint64_t bytes, Direction d, HostMemory m,
                        Api api = Api::cudaMemcpyAsync) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(api);
  r.begin_ticks = begin;
  r.end_ticks = end;
  r.bytes = bytes;
  r.direction = static_cast<uint8_t>(d);
  r.host_memory = static_cast<uint8_t>(m);
  r.stream = 0xABC;
  r.tid = 77;
  return r;
}

// Reads the database the way any other reader would: a separate connection per query.
class Sql {
 public:
  explicit Sql(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
      ADD_FAILURE() << "cannot open " << path;
  }
  ~Sql() { sqlite3_close(db_); }
  std::vector<std::vector<std::string>> rows(const std::string& sql) {
    std::vector<std::vector<std::string>> out;
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db_);
      return out;
    }
    while (sqlite3_step(s) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int c = 0; c < sqlite3_column_count(s); ++c) {
        const auto* t = sqlite3_column_text(s, c);
        row.emplace_back(t ? reinterpret_cast<const char*>(t) : "NULL");
      }
      out.push_back(std::move(row));
    }
    sqlite3_finalize(s);
    return out;
  }
  int64_t integer(const std::string& sql) {
    const auto r = rows(sql);
    if (r.size() != 1 || r[0].size() != 1) {
      ADD_FAILURE() << sql << ": expected one value, got " << r.size() << " rows";
      return -1;
    }
    return std::stoll(r[0][0]);
  }

 private:
  sqlite3* db_ = nullptr;
};

class CollectorTest : public test::TempDirTest {
 protected:
  void TearDown() override {
    for (const std::string& name : list_segments(getuid(), job_)) bip::shared_memory_object::remove(name.c_str());
  }
  CollectorOptions options() const {
    CollectorOptions o;
    o.job = job_;
    o.database_path = db_path_;
    o.uid = getuid();
    return o;
  }
  int64_t value(const std::string& sql) { return Sql(db_path_).integer(sql); }
  std::vector<std::vector<std::string>> rows(const std::string& sql) { return Sql(db_path_).rows(sql); }

  const std::string job_ = unique_job();
  const std::string db_path_ = dir_ + "/run.db";
};

TEST_F(CollectorTest, ListSegmentsFindsOnlyThisJobsSegments) {
  TestSegment a(job_, Opts().with_pid(11));
  TestSegment b(job_, Opts().with_pid(12).with_suffix(".1"));
  TestSegment other(job_ + "x", Opts().with_pid(13));
  auto names = list_segments(getuid(), job_);
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], segment_name(getuid(), job_, 11));
  EXPECT_EQ(names[1], segment_name(getuid(), job_, 12) + ".1");
}

TEST_F(CollectorTest, DrainsRecordsIntoTheDatabase) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(copy_record(10'000, 10'500, 4096, Direction::HostToDevice, HostMemory::Pageable)));
  ASSERT_TRUE(
      seg.ring(0).push(copy_record(11'000, 11'200, 512, Direction::DeviceToHost, HostMemory::Pinned, Api::cudaMemcpy)));
  EventRecord sync{};
  sync.api = static_cast<uint16_t>(Api::cudaStreamSynchronize);
  sync.begin_ticks = 12'000;
  sync.end_ticks = 15'000;
  sync.stream = 0xABC;
  ASSERT_TRUE(seg.ring(1).push(sync));

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 3u);
  EXPECT_EQ(collector.live_segments(), 1u);

  const auto processes = rows("SELECT segment, pid, host, rank, local_rank, world_size, job, command, "
                              "start_realtime_ns, start_monotonic_ns, events, dropped_ring_full, malformed, ended "
                              "FROM processes");
  ASSERT_EQ(processes.size(), 1u);
  const std::vector<std::string> expected_process = {seg.name(),
                                                     std::to_string(getpid()),
                                                     "unit-host",
                                                     "3",
                                                     "1",
                                                     "8",
                                                     job_,
                                                     "python train.py --epochs 1",
                                                     "1700000000000000000",
                                                     "5000",
                                                     "3",
                                                     "0",
                                                     "0",
                                                     "0"};
  EXPECT_EQ(processes[0], expected_process);

  // Copies are counted in `calls`, one row per key; the sync is also kept one by one in `events`.
  const std::string copy_api = std::to_string(int(Api::cudaMemcpyAsync));
  const std::string memcpy_api = std::to_string(int(Api::cudaMemcpy));
  const std::string sync_api = std::to_string(int(Api::cudaStreamSynchronize));
  EXPECT_EQ(rows("SELECT api, direction, host_memory, native_stack, python_stack, null_object, follows_copy, count, "
                 "bytes, total_ns, max_ns, first_begin_ns, last_end_ns FROM calls ORDER BY first_begin_ns"),
            (std::vector<std::vector<std::string>>{
                {copy_api, "1", "2", "0", "0", "1", "0", "1", "4096", "500", "500", "10000", "10500"},
                {memcpy_api, "2", "1", "0", "0", "1", "0", "1", "512", "200", "200", "11000", "11200"},
                {sync_api, "0", "0", "0", "0", "1", "0", "1", "0", "3000", "3000", "12000", "15000"}}));
  EXPECT_EQ(rows("SELECT api, bytes, direction, host_memory, begin_ns, end_ns, tid, stream, follows_copy FROM events"),
            (std::vector<std::vector<std::string>>{
                {sync_api, "0", "0", "0", "12000", "15000", "0", std::to_string(0xABC), "0"}}));
  // The lookup tables name what the integers mean.
  EXPECT_EQ(rows("SELECT a.name, a.class, d.name, m.name FROM calls c JOIN apis a ON a.id = c.api "
                 "JOIN directions d ON d.id = c.direction JOIN host_memories m ON m.id = c.host_memory "
                 "ORDER BY c.first_begin_ns LIMIT 1")[0],
            (std::vector<std::string>{"cudaMemcpyAsync", "copy", "h2d", "pageable"}));
  EXPECT_EQ(rows("SELECT value FROM meta WHERE key = 'job'")[0][0], job_);
  EXPECT_EQ(rows("SELECT value FROM meta WHERE key = 'schema_version'")[0][0], "8");
  EXPECT_EQ(rows("SELECT value FROM meta WHERE key = 'writer_version'")[0][0], "0.1.0");

  // Nothing new: nothing stored, the live producer's segment stays.
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 3);
  EXPECT_EQ(value("SELECT events FROM processes"), 3);
  EXPECT_TRUE(shm_exists(seg.name()));

  // Later records add to the same process row, and to the row of their key.
  ASSERT_TRUE(seg.ring(1).push(copy_record(20'000, 20'001, 1, Direction::DeviceToDevice, HostMemory::Device)));
  ASSERT_TRUE(seg.ring(1).push(copy_record(30'000, 30'010, 1, Direction::DeviceToDevice, HostMemory::Device)));
  EXPECT_EQ(collector.pass(), 2u);
  ASSERT_TRUE(seg.ring(0).push(copy_record(40'000, 40'005, 1, Direction::DeviceToDevice, HostMemory::Device)));
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(value("SELECT events FROM processes"), 6);
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 6);
  EXPECT_EQ(rows("SELECT count, bytes, total_ns, max_ns, first_begin_ns, last_end_ns FROM calls WHERE direction = 3"),
            (std::vector<std::vector<std::string>>{{"3", "3", "16", "10", "20000", "40005"}}));
  EXPECT_EQ(value("SELECT count(*) FROM events"), 1);
  EXPECT_EQ(value("SELECT count(*) FROM recent_events"), 0) << "written every 10 s, at a process's end, at exit";
}

TEST_F(CollectorTest, MalformedRecordsAreCountedNotStored) {
  TestSegment seg(job_, Opts());
  EventRecord bad_api = copy_record(1, 2, 8, Direction::HostToDevice, HostMemory::Pinned);
  bad_api.api = 9999;
  EventRecord backwards = copy_record(50, 40, 8, Direction::HostToDevice, HostMemory::Pinned);
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 100, Direction::HostToDevice, HostMemory::Pinned)));
  ASSERT_TRUE(seg.ring(0).push(bad_api));
  ASSERT_TRUE(seg.ring(0).push(backwards));
  ASSERT_TRUE(seg.ring(0).push(copy_record(3, 4, 200, Direction::HostToDevice, HostMemory::Pinned)));

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 2u);
  EXPECT_EQ(value("SELECT malformed FROM processes"), 2);
  EXPECT_EQ(value("SELECT events FROM processes"), 2);
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 2);
  EXPECT_EQ(value("SELECT count(*) FROM calls WHERE api >= " + std::to_string(kApiCount)), 0);
  EXPECT_EQ(value("SELECT sum(bytes) FROM calls"), 300);
  EXPECT_EQ(value("SELECT count(*) FROM collector_log WHERE level = 'warning' AND message = '2 malformed "
                  "records skipped in /dev/shm/" +
                  seg.name() + "'"),
            1);
  // Counted once: another pass adds nothing.
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(value("SELECT malformed FROM processes"), 2);
}

TEST_F(CollectorTest, RingDropsAreReported) {
  TestSegment seg(job_, Opts());
  for (uint64_t i = 0; i < 20; ++i) seg.ring(0).push(copy_record(i, i, 1, Direction::HostToDevice, HostMemory::Pinned));
  for (uint64_t i = 0; i < 17; ++i) seg.ring(1).push(copy_record(i, i, 1, Direction::HostToDevice, HostMemory::Pinned));
  seg.header()->dropped_not_ready.store(3);

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 32u);
  EXPECT_EQ(value("SELECT dropped_ring_full FROM processes"), 5);
  EXPECT_EQ(value("SELECT dropped_not_ready FROM processes"), 3);
  EXPECT_EQ(value("SELECT events FROM processes"), 32);

  // The ring's counter is a running total: the row follows it without counting twice.
  for (uint64_t i = 0; i < 18; ++i) seg.ring(0).push(copy_record(i, i, 1, Direction::HostToDevice, HostMemory::Pinned));
  EXPECT_EQ(collector.pass(), 16u);
  EXPECT_EQ(value("SELECT dropped_ring_full FROM processes"), 7);
  EXPECT_EQ(value("SELECT events FROM processes"), 48);
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(value("SELECT dropped_ring_full FROM processes"), 7);
}

TEST_F(CollectorTest, GarbageSegmentIsSkippedOnceAndLeftAlone) {
  const std::string garbage_name = segment_prefix(getuid(), job_) + "garbage";
  {
    bip::shared_memory_object shm(bip::create_only, garbage_name.c_str(), bip::read_write, owner_only());
    shm.truncate(8192);
    bip::mapped_region region(shm, bip::read_write);
    std::memset(region.get_address(), 0xA5, region.get_size());
  }
  TestSegment good(job_, Opts());
  ASSERT_TRUE(good.ring(0).push(copy_record(1, 2, 3, Direction::HostToDevice, HostMemory::Pinned)));

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(collector.live_segments(), 1u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(value("SELECT count(*) FROM collector_log WHERE level = 'warning'"), 1);
  EXPECT_EQ(rows("SELECT message FROM collector_log WHERE level = 'warning'")[0][0],
            "skipped segment /dev/shm/" + garbage_name + ": not a trainshim segment (bad magic)");
  EXPECT_TRUE(shm_exists(garbage_name));  // not the collector's to delete
  EXPECT_TRUE(bip::shared_memory_object::remove(garbage_name.c_str()));
}

// A producer creates its segment before sizing it: a tiny one is young, not broken.
TEST_F(CollectorTest, SegmentSmallerThanAHeaderIsLeftForALaterPass) {
  const std::string tiny_name = segment_prefix(getuid(), job_) + "tiny";
  {
    bip::shared_memory_object shm(bip::create_only, tiny_name.c_str(), bip::read_write, owner_only());
    shm.truncate(16);
  }
  Collector collector(options());
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(collector.live_segments(), 0u);
  EXPECT_TRUE(rows("SELECT message FROM collector_log WHERE level = 'warning'").empty());
  EXPECT_TRUE(shm_exists(tiny_name));
  bip::shared_memory_object::remove(tiny_name.c_str());
}

pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

TEST_F(CollectorTest, DeadProducerIsDrainedEndedAndUnlinked) {
  TestSegment seg(job_, Opts().producer_gone());
  for (uint64_t i = 0; i < 16; ++i)
    ASSERT_TRUE(seg.ring(0).push(copy_record(i, i + 1, i, Direction::HostToDevice, HostMemory::Pinned)));
  ASSERT_TRUE(seg.ring(1).push(copy_record(100, 101, 7, Direction::DeviceToHost, HostMemory::Pinned)));
  // The producer died between claiming a slot of ring 1 and publishing it, after one more record.
  seg.header()->producer_state.store(static_cast<uint32_t>(ProducerState::Exited));
  seg.control(1)->head.fetch_add(1);
  ASSERT_TRUE(seg.ring(1).push(copy_record(200, 201, 9, Direction::DeviceToHost, HostMemory::Pinned)));
  ASSERT_TRUE(shm_exists(seg.name()));

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 18u);
  EXPECT_EQ(collector.live_segments(), 0u);
  EXPECT_FALSE(shm_exists(seg.name()));
  EXPECT_EQ(rows("SELECT events, ended, lost_unpublished, dropped_ring_full FROM processes")[0],
            (std::vector<std::string>{"18", "1", "1", "0"}));
  EXPECT_EQ(value("SELECT sum(bytes) FROM calls"), 120 + 7 + 9);
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 18);
  EXPECT_EQ(value("SELECT count(*) FROM recent_events"), 18) << "written when the process ended";
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 1);
}

TEST_F(CollectorTest, UnpublishedSegmentIsPickedUpOncePublished) {
  TestSegment seg(job_, Opts().unpublished());
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 64, Direction::HostToDevice, HostMemory::Pageable)));
  Collector collector(options());
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(collector.live_segments(), 0u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 0);
  EXPECT_EQ(value("SELECT count(*) FROM collector_log WHERE level = 'warning'"), 0);
  EXPECT_TRUE(shm_exists(seg.name()));

  seg.publish();
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(collector.live_segments(), 1u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(value("SELECT bytes FROM calls"), 64);
}

// The shim creates its segment, sizes it, and only then writes the header (publishing last).
// A collector pass in between sees a zero-filled segment: it must be retried, not rejected.
TEST_F(CollectorTest, SegmentBeingCreatedIsRetriedNotRejected) {
  TestSegment seg(job_, Opts().unpublished().header_unwritten());
  Collector collector(options());
  EXPECT_EQ(collector.pass(), 0u);

  seg.fill_header();
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 64, Direction::HostToDevice, HostMemory::Pageable)));
  seg.publish();
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(collector.live_segments(), 1u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(value("SELECT count(*) FROM collector_log WHERE level = 'warning'"), 0);
}

TEST_F(CollectorTest, RunFinishesWithAFullDrain) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 64, Direction::HostToDevice, HostMemory::Pinned)));
  const std::atomic<bool> stop{true};
  {
    Collector collector(options());
    collector.run(stop);
  }
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 1);
  EXPECT_EQ(value("SELECT count(*) FROM recent_events"), 1) << "written at the collector's exit";
  EXPECT_EQ(rows("SELECT level, message FROM collector_log ORDER BY rowid")[0],
            (std::vector<std::string>{"info", fmt::format("collector {} started for job {}", getpid(), job_)}));
}

TEST_F(CollectorTest, ReopeningTheDatabaseAddsToIt) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 64, Direction::HostToDevice, HostMemory::Pinned)));
  {
    Collector collector(options());
    EXPECT_EQ(collector.pass(), 1u);
  }
  ASSERT_TRUE(seg.ring(0).push(copy_record(3, 4, 32, Direction::HostToDevice, HostMemory::Pinned)));
  {
    Collector collector(options());
    EXPECT_EQ(collector.pass(), 1u);
  }
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 2);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 1) << "the second collector carried on with the first's row";
  EXPECT_EQ(value("SELECT count(*) FROM calls"), 1) << "and added to its row of that key";
  EXPECT_EQ(value("SELECT count(*) FROM meta WHERE key = 'schema_version'"), 1);
}

// The load bias of this test program (the first object dl_iterate_phdr reports).
uint64_t executable_load_bias() {
  uint64_t bias = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<uint64_t*>(out) = info->dlpi_addr;
        return 1;
      },
      &bias);
  return bias;
}

EventRecord call_record(Api api, uint32_t tid, uint64_t stream, uint64_t begin, uint32_t native = 0,
                        uint32_t python = 0) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(api);
  r.tid = tid;
  r.stream = stream;
  r.begin_ticks = begin;
  r.end_ticks = begin + 10;
  r.native_stack = native;
  r.python_stack = python;
  return r;
}

// A wait is paired with the copy just before it on its thread and stream (follows_copy), and a
// poll without stacks counts under its thread's last poll that had them.
TEST_F(CollectorTest, WaitsArePairedWithTheCopyTheyFollowAndPollsInheritTheirThreadsStacks) {
  TestSegment seg(job_, Opts());
  RingView ring = seg.ring(0);
  EventRecord h2d = copy_record(100, 110, 64, Direction::HostToDevice, HostMemory::Pinned);
  h2d.tid = 5;
  h2d.stream = 1;
  ASSERT_TRUE(ring.push(h2d));
  ASSERT_TRUE(ring.push(call_record(Api::cudaStreamQuery, 6, 1, 120, 0, 0)));        // another thread: no stacks yet
  ASSERT_TRUE(ring.push(call_record(Api::cudaStreamSynchronize, 5, 1, 130, 3, 4)));  // follows the h2d copy
  ASSERT_TRUE(ring.push(call_record(Api::cudaStreamSynchronize, 5, 1, 140, 3, 4)));  // the copy was followed already
  ASSERT_TRUE(ring.push(call_record(Api::cudaStreamQuery, 5, 1, 150, 9, 8)));        // a sampled poll
  ASSERT_TRUE(ring.push(call_record(Api::cudaStreamQuery, 5, 1, 160)));              // counted under 9, 8
  EventRecord d2h = copy_record(170, 180, 32, Direction::DeviceToHost, HostMemory::Pageable);
  d2h.tid = 5;
  d2h.stream = 1;
  ASSERT_TRUE(ring.push(d2h));
  ASSERT_TRUE(ring.push(call_record(Api::cudaStreamSynchronize, 5, 2, 190, 3, 4)));  // another stream
  ASSERT_TRUE(ring.push(d2h));
  ASSERT_TRUE(ring.push(call_record(Api::cudaStreamQuery, 5, 1, 200)));  // a poll follows it too
  ASSERT_TRUE(ring.push(call_record(Api::cudaFree, 5, 1, 210, 3, 4)));

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 11u);
  const std::string sync = std::to_string(int(Api::cudaStreamSynchronize));
  const std::string poll = std::to_string(int(Api::cudaStreamQuery));
  const std::string copy = std::to_string(int(Api::cudaMemcpyAsync));
  const std::string free = std::to_string(int(Api::cudaFree));
  // In api.def's order: the copy, the sync, the free, the poll.
  EXPECT_EQ(rows("SELECT api, native_stack, python_stack, follows_copy, count, first_begin_ns FROM calls "
                 "ORDER BY api, follows_copy, native_stack, first_begin_ns"),
            (std::vector<std::vector<std::string>>{
                {copy, "0", "0", "0", "1", "100"},
                {copy, "0", "0", "0", "2", "170"},
                {sync, "3", "4", "0", "2", "140"},
                {sync, "3", "4", "1", "1", "130"},
                {free, "3", "4", "0", "1", "210"},
                {poll, "0", "0", "0", "1", "120"},
                {poll, "9", "8", "0", "2", "150"},
                {poll, "9", "8", "2", "1", "200"},
            }));
  EXPECT_EQ(rows("SELECT api, begin_ns, follows_copy FROM events ORDER BY begin_ns"),
            (std::vector<std::vector<std::string>>{
                {sync, "130", "1"}, {sync, "140", "0"}, {sync, "190", "0"}, {free, "210", "0"}}));
  EXPECT_EQ(value("SELECT events FROM processes"), 11);
}

// The window keeps each process's most recent copies and polls, oldest first, rewritten whole.
TEST_F(CollectorTest, RecentEventsKeepTheLastCopiesAndPollsOfEachProcess) {
  TestSegment seg(job_, Opts().producer_gone());
  for (uint64_t i = 1; i <= 5; ++i)
    ASSERT_TRUE(seg.ring(0).push(copy_record(i * 100, i * 100 + 1, i, Direction::HostToDevice, HostMemory::Pinned)));
  ASSERT_TRUE(seg.ring(1).push(call_record(Api::cudaDeviceSynchronize, 77, 0, 1000)));
  CollectorOptions o = options();
  o.recent_events = 3;
  Collector collector(o);
  EXPECT_EQ(collector.pass(), 6u);
  EXPECT_EQ(rows("SELECT begin_ns, bytes FROM recent_events ORDER BY rowid"),
            (std::vector<std::vector<std::string>>{{"300", "3"}, {"400", "4"}, {"500", "5"}}));
  EXPECT_EQ(value("SELECT count(*) FROM events"), 1) << "the sync alone";
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 6);
}

TEST_F(CollectorTest, NoRecentEventsAreKeptWhenTheWindowIsZero) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 64, Direction::HostToDevice, HostMemory::Pinned)));
  CollectorOptions o = options();
  o.recent_events = 0;
  {
    Collector collector(o);
    EXPECT_EQ(collector.pass(), 1u);
  }
  EXPECT_EQ(value("SELECT count(*) FROM recent_events"), 0);
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 1);
}

// A running process's window is rewritten on the flush period, not per pass.
TEST_F(CollectorTest, RecentEventsOfARunningProcessAreRewrittenOnTheirPeriod) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 64, Direction::HostToDevice, HostMemory::Pinned)));
  CollectorOptions o = options();
  o.recent_flush = std::chrono::milliseconds(0);
  Collector collector(o);
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(value("SELECT count(*) FROM recent_events"), 1);
  ASSERT_TRUE(seg.ring(0).push(copy_record(3, 4, 32, Direction::HostToDevice, HostMemory::Pinned)));
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(rows("SELECT begin_ns FROM recent_events ORDER BY rowid"),
            (std::vector<std::vector<std::string>>{{"1"}, {"3"}}));
}

// While a producer runs, a pass writes at most RecentWriter::kRowsPerPass rows of the window (a
// whole window in one pass held its commit, and so the rings, for 20-45 ms): the table trails the
// window, holds at most its capacity, oldest first, each copy once.
TEST_F(CollectorTest, ALiveProcesssRecentWindowIsWrittenASlicePerPass) {
  static_assert(RecentWriter::kRowsPerPass == 256);
  Opts big;
  big.capacity = 1024;
  TestSegment seg(job_, big);
  const auto push = [&](uint64_t first, uint64_t last) {
    for (uint64_t i = first; i <= last; ++i)
      ASSERT_TRUE(seg.ring(0).push(copy_record(i, i + 1, 8, Direction::DeviceToDevice, HostMemory::Unknown)));
  };
  const std::string span = "SELECT count(*), count(DISTINCT begin_ns), min(begin_ns), max(begin_ns) FROM recent_events";
  using Row = std::vector<std::string>;
  CollectorOptions o = options();
  o.recent_events = 500;
  o.recent_flush = std::chrono::milliseconds(0);
  {
    Collector collector(o);
    push(1, 600);
    EXPECT_EQ(collector.pass(), 600u);
    EXPECT_EQ(rows(span)[0], (Row{"256", "256", "101", "356"})) << "the newest 500 queued, 256 written";
    EXPECT_EQ(collector.pass(), 0u);
    EXPECT_EQ(rows(span)[0], (Row{"500", "500", "101", "600"}));
    // The reader stays SegmentReader::kReaderLag records behind a head that moved since its last pass.
    static_assert(SegmentReader::kReaderLag == 64);
    push(601, 900);
    EXPECT_EQ(collector.pass(), 236u);
    EXPECT_EQ(rows(span)[0], (Row{"500", "500", "337", "836"})) << "the oldest 236 gave way";
    EXPECT_EQ(collector.pass(), 64u);
    EXPECT_EQ(rows(span)[0], (Row{"500", "500", "401", "900"}));
    push(901, 1500);
    EXPECT_EQ(collector.pass(), 536u);
    EXPECT_EQ(rows(span)[0], (Row{"500", "500", "657", "1192"})) << "of the newest 500 (937-1436), 256 written";
    EXPECT_EQ(collector.pass(), 64u);
  }
  EXPECT_EQ(rows(span)[0], (Row{"500", "500", "1001", "1500"})) << "the rest written at exit";
  EXPECT_EQ(value("SELECT count(*) FROM recent_events WHERE rowid > (SELECT min(rowid) FROM recent_events r "
                  "WHERE r.begin_ns > recent_events.begin_ns)"),
            0)
      << "rowid order is time order";
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 1500);
}

// A window written a slice at a time is taken up by a collector that replaces a dead one: it goes
// on from the rows there, never holding more than the capacity.
TEST_F(CollectorTest, AReplacingCollectorTrimsTheRecentRowsItFoundBeforeAddingItsOwn) {
  Opts big;
  big.capacity = 1024;
  TestSegment seg(job_, big);
  for (uint64_t i = 1; i <= 400; ++i)
    ASSERT_TRUE(seg.ring(0).push(copy_record(i, i + 1, 8, Direction::DeviceToDevice, HostMemory::Unknown)));
  CollectorOptions o = options();
  o.recent_events = 300;
  o.recent_flush = std::chrono::milliseconds(0);
  {
    Collector collector(o);
    EXPECT_EQ(collector.pass(), 400u);
  }
  using Row = std::vector<std::string>;
  const std::string span = "SELECT count(*), min(begin_ns), max(begin_ns) FROM recent_events";
  EXPECT_EQ(rows(span)[0], (Row{"300", "101", "400"}));
  for (uint64_t i = 401; i <= 500; ++i)
    ASSERT_TRUE(seg.ring(0).push(copy_record(i, i + 1, 8, Direction::DeviceToDevice, HostMemory::Unknown)));
  Collector again(o);
  EXPECT_EQ(again.pass(), 100u);
  EXPECT_EQ(rows(span)[0], (Row{"300", "201", "500"}));
}

// The WAL is copied into the database file by the database's own thread, never by the commit that
// fills it (SQLite's automatic checkpoint syncs the disk inside that commit, for milliseconds).
TEST_F(CollectorTest, TheWalIsCheckpointedByTheDatabasesThreadNotByACommit) {
  Database db(db_path_, job_);
  TestSegment seg(job_, Opts());
  const int64_t process = db.add_process(seg.name(), *seg.header());
  db.commit();
  const auto file_bytes = [&] { return fs::file_size(db_path_); };
  const uintmax_t before = file_bytes();
  for (uint64_t i = 0; i < 100'000; ++i)
    db.add_event(process, call_record(Api::cudaDeviceSynchronize, 77, 0, i), i, i + 1);
  db.commit();
  EXPECT_GE(fs::file_size(db_path_ + "-wal"), uintmax_t(WalCheckpointer::kPages) * 4096);
  for (int i = 0; i < 3000 && db.checkpoints() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(db.checkpoints(), 1u) << "woken once by the commit that left 1000 pages or more";
  EXPECT_GT(file_bytes(), before + uintmax_t(WalCheckpointer::kPages) * 4096) << "the rows reached the database file";
  EXPECT_EQ(Sql(db_path_).integer("SELECT count(*) FROM events"), 100'000);
}

// A database of an older schema is left as it is, and the refusal names both versions.
TEST_F(CollectorTest, DatabaseOfAnotherSchemaIsRefusedUntouched) {
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                           "INSERT INTO meta VALUES('schema_version', '5')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  try {
    Database db(db_path_, job_);
    ADD_FAILURE() << "opened";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              db_path_ + " holds schema version 5, this collector writes version 8: set TRAINSHIM_OUT to a new file");
  }
  EXPECT_EQ(rows("SELECT name FROM sqlite_master"),
            (std::vector<std::vector<std::string>>{{"meta"}, {"sqlite_autoindex_meta_1"}}));
}

// Review §13: a collector killed between its commit and giving the slots back leaves records in
// the ring that are already stored; the one that replaces it carries on with the same process
// row from the positions committed with them: nothing stored twice, nothing lost.
TEST_F(CollectorTest, ACollectorReplacingADeadOneResumesItsRowFromTheCommittedPositions) {
  TestSegment seg(job_, Opts());
  for (uint64_t i = 1; i <= 3; ++i)
    ASSERT_TRUE(seg.ring(0).push(copy_record(i, i + 1, 10, Direction::HostToDevice, HostMemory::Pinned)));
  ASSERT_TRUE(seg.ring(1).push(call_record(Api::cudaDeviceSynchronize, 77, 0, 50)));
  // This test program as the process's one module, recorded before the collector died.
  const std::string exe = fs::read_symlink("/proc/self/exe");
  SideRecord module{};
  module.kind = uint16_t(SideKind::Module);
  module.id = 1;
  module.value = executable_load_bias();
  std::strncpy(module.text + kModulePathOffset, exe.c_str(), kSideTextBytes - kModulePathOffset - 1);
  ASSERT_TRUE(seg.side_ring().push(module));
  {
    Collector first(options());
    EXPECT_EQ(first.pass(), 4u);
  }
  EXPECT_EQ(rows("SELECT ring, position FROM segment_positions ORDER BY ring"),
            (std::vector<std::vector<std::string>>{{"0", "3"}, {"1", "1"}, {"2", "1"}}))
      << "the side ring's too, after the event rings";
  // As if it died before release(): the slots hold their records again and the tails are back.
  for (uint32_t ring : {0u, 1u}) {
    auto* slots = reinterpret_cast<Slot*>(reinterpret_cast<char*>(seg.control(ring)) + sizeof(RingControl));
    for (uint64_t pos = 0; pos < seg.control(ring)->tail.load(); ++pos) slots[pos].state.store(1);
    seg.control(ring)->tail.store(0);
  }
  ASSERT_TRUE(seg.ring(0).push(copy_record(4, 5, 10, Direction::HostToDevice, HostMemory::Pinned)));
  // A stack published after the death, in the module the dead collector had read: still named.
  SideRecord stack{};
  stack.kind = uint16_t(SideKind::NativeStack);
  stack.id = 1;
  stack.count = 1;
  stack.native[0] = reinterpret_cast<uint64_t>(&executable_load_bias) + 1;
  ASSERT_TRUE(seg.side_ring().push(stack));

  Collector second(options());
  EXPECT_EQ(second.pass(), 1u) << "the one record stored by nobody yet";
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(rows("SELECT events, ended FROM processes")[0], (std::vector<std::string>{"5", "0"}));
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 5);
  EXPECT_EQ(value("SELECT sum(bytes) FROM calls"), 40);
  EXPECT_EQ(value("SELECT count(*) FROM calls"), 2) << "the copies' row and the sync's, each counted on";
  EXPECT_EQ(value("SELECT count(*) FROM events"), 1);
  EXPECT_EQ(seg.control(0)->tail.load(), 4u) << "given back once committed";
  EXPECT_EQ(seg.control(1)->tail.load(), 1u);
  EXPECT_EQ(rows("SELECT ring, position FROM segment_positions ORDER BY ring"),
            (std::vector<std::vector<std::string>>{{"0", "4"}, {"1", "1"}, {"2", "2"}}));
  EXPECT_EQ(rows("SELECT module, function FROM native_frames"),
            (std::vector<std::vector<std::string>>{
                {exe, "trainshim::collector::(anonymous namespace)::executable_load_bias()"}}));
  EXPECT_EQ(value("SELECT count(*) FROM collector_log WHERE message = 'resumed reading /dev/shm/" + seg.name() +
                  " (process row 1)'"),
            1);

  // Once the producer is gone and the segment drained, the row ends and its positions go.
  seg.producer_exits();
  EXPECT_EQ(second.pass(), 0u);
  EXPECT_EQ(value("SELECT ended FROM processes"), 1);
  EXPECT_EQ(value("SELECT count(*) FROM segment_positions"), 0);
  EXPECT_EQ(rows("SELECT begin_ns FROM recent_events ORDER BY rowid"),
            (std::vector<std::vector<std::string>>{{"1"}, {"2"}, {"3"}, {"4"}}))
      << "the dead collector's window, carried on";
}

// A process's row holds totals: a collector that carries on with another's row adds what it
// drains to the counts it finds there, and writes the row only when a count changed.
TEST_F(CollectorTest, ACollectorCarryingOnWithARowAddsToItsCounts) {
  TestSegment seg(job_, Opts());
  EventRecord bad_api = copy_record(1, 2, 8, Direction::HostToDevice, HostMemory::Pinned);
  bad_api.api = 9999;
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 100, Direction::HostToDevice, HostMemory::Pinned)));
  ASSERT_TRUE(seg.ring(0).push(bad_api));
  seg.control(1)->dropped.store(3);
  {
    Collector first(options());
    EXPECT_EQ(first.pass(), 1u);
  }
  EXPECT_EQ(rows("SELECT events, malformed, dropped_ring_full FROM processes")[0],
            (std::vector<std::string>{"1", "1", "3"}));

  ASSERT_TRUE(seg.ring(0).push(bad_api));
  ASSERT_TRUE(seg.ring(0).push(copy_record(3, 4, 200, Direction::HostToDevice, HostMemory::Pinned)));
  ASSERT_TRUE(seg.ring(0).push(copy_record(5, 6, 200, Direction::HostToDevice, HostMemory::Pinned)));
  Collector second(options());
  EXPECT_EQ(second.pass(), 2u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(rows("SELECT events, malformed, dropped_ring_full FROM processes")[0],
            (std::vector<std::string>{"3", "2", "3"}));
  EXPECT_EQ(second.pass(), 0u);
  EXPECT_EQ(rows("SELECT events, malformed, dropped_ring_full FROM processes")[0],
            (std::vector<std::string>{"3", "2", "3"}));
}

// An ended process is never resumed: a new segment of the same name (a reused pid) is a new row.
TEST_F(CollectorTest, AnEndedProcessRowIsNotResumed) {
  {
    TestSegment seg(job_, Opts().producer_gone());
    ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 10, Direction::HostToDevice, HostMemory::Pinned)));
    Collector collector(options());
    EXPECT_EQ(collector.pass(), 1u);
  }
  TestSegment again(job_, Opts());
  ASSERT_TRUE(again.ring(0).push(copy_record(1, 2, 10, Direction::HostToDevice, HostMemory::Pinned)));
  Collector collector(options());
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(rows("SELECT id, ended, events FROM processes ORDER BY id"),
            (std::vector<std::vector<std::string>>{{"1", "1", "1"}, {"2", "0", "1"}}));
}

// Review §18: whether a producer runs is its liveness lock; its pid says nothing (another pid
// namespace, a reused pid).
TEST_F(CollectorTest, ProducerLivenessIsItsLockNotItsPid) {
  TestSegment locked(job_, Opts().with_pid(dead_pid()));
  TestSegment unlocked(job_, Opts().with_suffix(".1").producer_gone());
  SegmentReader locked_reader(locked.name());
  SegmentReader unlocked_reader(unlocked.name());
  EXPECT_TRUE(locked_reader.producer_alive());
  EXPECT_FALSE(unlocked_reader.producer_alive());
  locked.producer_exits();
  EXPECT_FALSE(locked_reader.producer_alive());
}

std::string refusal(const std::string& name, const std::string& what) {
  const std::string path = std::string(kShmDir) + "/" + name;
  return "skipped segment " + path + ": not trusted: " + what +
         "; another local user may be injecting records into this job: check who created " + path + ", then remove it";
}

std::string not_owner_only(unsigned uid, const std::string& mode) {
  return "owned by uid " + std::to_string(uid) + ", mode " + mode + " (only a regular file of this user, uid " +
         std::to_string(getuid()) + ", that no one else may read or write is read)";
}

// Review §6: /dev/shm is writable by every user; a segment under this job's name that someone
// else owns or may write is not read, and the refusal names it once.
TEST_F(CollectorTest, SegmentOthersMayWriteIsRefusedWithItsOwnerAndMode) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 1337, Direction::HostToDevice, HostMemory::Pageable)));
  ASSERT_EQ(chmod(seg.path().c_str(), 0666), 0);

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(collector.live_segments(), 0u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 0);
  EXPECT_EQ(seg.ring(0).pending(), 1u) << "nothing was read from it";
  EXPECT_EQ(rows("SELECT message FROM collector_log WHERE level = 'warning'"),
            (std::vector<std::vector<std::string>>{{refusal(seg.name(), not_owner_only(getuid(), "0666"))}}));
  EXPECT_TRUE(shm_exists(seg.name()));
}

TEST_F(CollectorTest, SegmentOfAnotherUserIsRefusedWithItsOwnerAndMode) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 1337, Direction::HostToDevice, HostMemory::Pageable)));
  ASSERT_EQ(chown(seg.path().c_str(), 65534, 65534), 0) << "the unit tests run as root";

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 0);
  EXPECT_EQ(rows("SELECT message FROM collector_log WHERE level = 'warning'"),
            (std::vector<std::vector<std::string>>{{refusal(seg.name(), not_owner_only(65534, "0600"))}}));
}

TEST_F(CollectorTest, LinkUnderASegmentNameIsNotFollowed) {
  TestSegment target(job_ + "x", Opts());
  ASSERT_TRUE(target.ring(0).push(copy_record(1, 2, 1337, Direction::HostToDevice, HostMemory::Pageable)));
  const std::string link = segment_prefix(getuid(), job_) + "link";
  ASSERT_EQ(symlink(target.path().c_str(), (std::string(kShmDir) + "/" + link).c_str()), 0);

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 0);
  EXPECT_EQ(target.ring(0).pending(), 1u);
  EXPECT_EQ(rows("SELECT message FROM collector_log WHERE level = 'warning'"),
            (std::vector<std::vector<std::string>>{{refusal(link, "a symbolic link (not followed)")}}));
  fs::remove(std::string(kShmDir) + "/" + link);
}

// Review §8: the geometry is read once, validated, and only that copy is used. A writer of the
// segment that rewrites it afterwards would otherwise send the collector outside the mapping.
TEST_F(CollectorTest, GeometryRewrittenAfterOpeningIsNeverUsed) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 10, Direction::HostToDevice, HostMemory::Pinned)));
  Collector collector(options());
  EXPECT_EQ(collector.pass(), 1u);

  SegmentHeader* h = seg.header();
  h->ring_count = kMaxRings;
  h->first_ring_capacity = kMaxRingCapacity;
  h->ring_capacity = kMaxRingCapacity;
  h->side_capacity = kMaxSideCapacity;
  h->segment_bytes = segment_bytes(kMaxRings, kMaxRingCapacity, kMaxRingCapacity, kMaxSideCapacity);
  ASSERT_TRUE(seg.ring(1).push(copy_record(3, 4, 20, Direction::HostToDevice, HostMemory::Pinned)));
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(rows("SELECT events, dropped_ring_full, dropped_side_full, malformed FROM processes")[0],
            (std::vector<std::string>{"2", "0", "0", "0"}));
  EXPECT_EQ(value("SELECT sum(bytes) FROM calls"), 30);
  EXPECT_EQ(value("SELECT count(*) FROM collector_log WHERE level = 'warning'"), 0);
}

// Review §8: a segment shrunk under the mapping faults (SIGBUS) on its next access. The collector
// drops that segment, says so once, and goes on with the job's others.
TEST_F(CollectorTest, SegmentShrunkWhileReadIsDroppedAndTheOthersStillCollected) {
  TestSegment shrunk(job_, Opts());
  TestSegment other(job_, Opts().with_suffix(".1"));
  ASSERT_TRUE(shrunk.ring(0).push(copy_record(1, 2, 10, Direction::HostToDevice, HostMemory::Pinned)));
  ASSERT_TRUE(shrunk.ring(1).push(copy_record(1, 2, 10, Direction::HostToDevice, HostMemory::Pinned)));
  ASSERT_TRUE(other.ring(0).push(copy_record(1, 2, 100, Direction::HostToDevice, HostMemory::Pinned)));
  Collector collector(options());
  EXPECT_EQ(collector.pass(), 3u);

  ASSERT_TRUE(shrunk.ring(0).push(copy_record(3, 4, 10, Direction::HostToDevice, HostMemory::Pinned)));
  ASSERT_TRUE(other.ring(0).push(copy_record(3, 4, 100, Direction::HostToDevice, HostMemory::Pinned)));
  ASSERT_EQ(truncate(shrunk.path().c_str(), 0), 0);
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(collector.live_segments(), 1u);
  const std::string dropped = "dropped segment /dev/shm/" + shrunk.name() +
                              ": it shrank while being read (something running as this user truncated it), 0 records "
                              "stored from it this pass; the rest of that process's records are lost; remove the file "
                              "once inspected";
  EXPECT_EQ(rows("SELECT message FROM collector_log WHERE level = 'warning'"),
            (std::vector<std::vector<std::string>>{{dropped}}));
  EXPECT_EQ(rows("SELECT segment, events, ended FROM processes ORDER BY segment"),
            (std::vector<std::vector<std::string>>{{shrunk.name(), "2", "0"}, {other.name(), "2", "0"}}));

  // Never opened again; the other segment is still read.
  ASSERT_TRUE(other.ring(1).push(copy_record(5, 6, 100, Direction::HostToDevice, HostMemory::Pinned)));
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(value("SELECT count(*) FROM collector_log WHERE level = 'warning'"), 1);
  EXPECT_EQ(value("SELECT sum(bytes) FROM calls"), 10 + 10 + 300);
  EXPECT_TRUE(shm_exists(shrunk.name())) << "left for inspection";
}

TEST_F(CollectorTest, ReaderOfAShrunkSegmentReadsNothingMoreAndKeepsItsHeader) {
  TestSegment seg(job_, Opts());
  for (uint64_t i = 0; i < 20; ++i) seg.ring(0).push(copy_record(i, i, 1, Direction::HostToDevice, HostMemory::Pinned));
  SegmentReader reader(seg.name());
  EXPECT_EQ(reader.dropped_ring_full(), 4u);
  ASSERT_EQ(truncate(seg.path().c_str(), 0), 0);
  uint64_t seen = 0;
  const DrainCounts counts = reader.drain([&](const EventRecord&) { ++seen; }, false);
  EXPECT_TRUE(reader.truncated());
  EXPECT_EQ(counts.records, 0u);
  EXPECT_EQ(seen, 0u);
  EXPECT_EQ(reader.dropped_ring_full(), 0u);
  EXPECT_EQ(reader.header().rank, 3);
  EXPECT_EQ(reader.geometry().ring_capacity, 16u);
  EXPECT_TRUE(reader.producer_alive()) << "shrinking it does not end its producer";
}

// Review §9: a collective's communicator size is bounded; one forged size of 2^32 - 1 would have
// the hang watch hold an entry per rank.
TEST_F(CollectorTest, CollectiveOfAnImpossibleCommunicatorIsMalformed) {
  TestSegment seg(job_, Opts());
  EventRecord forged{};
  forged.api = static_cast<uint16_t>(Api::ncclAllReduce);
  forged.object = 7;
  forged.sequence = 1;
  forged.comm_size = 0xFFFFFFFF;
  EventRecord fine = forged;
  fine.comm_size = 4;
  fine.rank_in_comm = 2;
  ASSERT_TRUE(seg.ring(0).push(forged));
  ASSERT_TRUE(seg.ring(0).push(fine));

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(rows("SELECT events, malformed FROM processes")[0], (std::vector<std::string>{"1", "1"}));
  EXPECT_EQ(rows("SELECT comm_size, rank_in_comm FROM events")[0], (std::vector<std::string>{"4", "2"}));
}

// An all-reduce of communicator 0xC0 on stream 0x5, as the calling thread records it, and its GPU
// timing as the shim's polling thread (another thread, its own ring) writes it once the GPU has
// finished: a copy of the call but for api, detail (the GPU ns), stacks and thread.
EventRecord all_reduce(uint32_t sequence, uint64_t begin) {
  EventRecord r = call_record(Api::ncclAllReduce, 77, 0x5, begin, 3, 4);
  r.object = 0xC0;
  r.sequence = sequence;
  r.comm_size = 4;
  r.rank_in_comm = 2;
  r.bytes = 4096;
  return r;
}
EventRecord timing_of(const EventRecord& call, uint64_t gpu_ns) {
  EventRecord t = call;
  t.api = static_cast<uint16_t>(Api::ncclGpuTiming);
  t.detail = gpu_ns;
  t.native_stack = t.python_stack = 0;
  t.tid = 99;
  return t;
}
const std::string kTimingRows =
    "SELECT count(*) FROM events WHERE api = (SELECT id FROM apis WHERE name = 'ncclGpuTiming')";
const std::string kTimingsCounted =
    "SELECT coalesce(sum(count), 0) FROM calls WHERE api = (SELECT id FROM apis WHERE name = 'ncclGpuTiming')";

TEST_F(CollectorTest, AGpuTimingReadPassesAfterItsCollectiveLandsInThatCollectivesRow) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(all_reduce(1, 100)));
  ASSERT_TRUE(seg.ring(0).push(all_reduce(2, 300)));
  Collector collector(options());
  EXPECT_EQ(collector.pass(), 2u);
  EXPECT_EQ(rows("SELECT sequence, coalesce(gpu_ns, 'none') FROM events ORDER BY rowid"),
            (std::vector<std::vector<std::string>>{{"1", "none"}, {"2", "none"}}));
  // The second all-reduce finishes first on the GPU; the first one, two passes later.
  ASSERT_TRUE(seg.ring(1).push(timing_of(all_reduce(2, 300), 2'345'678)));
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(collector.pass(), 0u);
  ASSERT_TRUE(seg.ring(1).push(timing_of(all_reduce(1, 100), 1'234'567)));
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(rows("SELECT sequence, gpu_ns, flags, exchange, native_stack, tid FROM events ORDER BY rowid"),
            (std::vector<std::vector<std::string>>{{"1", "1234567", "0", "0", "3", "77"},
                                                   {"2", "2345678", "0", "0", "3", "77"}}))
      << "each in its own collective's row, the call's stacks and thread kept";
  EXPECT_EQ(value(kTimingRows), 0) << "no row of its own";
  EXPECT_EQ(value(kTimingsCounted), 2) << "still counted";
  EXPECT_EQ(rows("SELECT events FROM processes")[0][0], "4");
}

// The collective's ring is read behind its moving head: its timing, in the polling thread's ring,
// can be read first. It waits in a row of its own, folded into the collective's once that is read.
TEST_F(CollectorTest, AGpuTimingReadBeforeItsCollectiveIsFoldedIntoItsRowOnceTheCollectiveComes) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(1).push(timing_of(all_reduce(1, 100), 5'000)));
  Collector collector(options());
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(value(kTimingRows), 1) << "held until its collective comes";
  ASSERT_TRUE(seg.ring(0).push(all_reduce(1, 100)));
  ASSERT_TRUE(seg.ring(0).push(all_reduce(2, 300)));
  EXPECT_EQ(collector.pass(), 2u);
  EXPECT_EQ(value(kTimingRows), 0);
  EXPECT_EQ(rows("SELECT sequence, coalesce(gpu_ns, 'none') FROM events ORDER BY rowid"),
            (std::vector<std::vector<std::string>>{{"1", "5000"}, {"2", "none"}}));
  // A timing whose collective never comes (lost to a full ring) is dropped when its process ends,
  // still counted.
  ASSERT_TRUE(seg.ring(1).push(timing_of(all_reduce(3, 500), 7'000)));
  EXPECT_EQ(collector.pass(), 1u);
  EXPECT_EQ(value(kTimingRows), 1);
  seg.producer_exits();
  EXPECT_EQ(collector.pass(), 0u);
  EXPECT_EQ(value(kTimingRows), 0);
  EXPECT_EQ(value(kTimingsCounted), 2);
  EXPECT_EQ(value("SELECT count(*) FROM events"), 2);
}

// A group's operation is timed once, on its first call; a point-to-point group that exchanged with
// every rank (all_to_all) says so in its timing, with the exchange's number.
TEST_F(CollectorTest, AGroupsTimingLandsInItsFirstCallsRowWithTheExchangeItWas) {
  TestSegment seg(job_, Opts());
  EventRecord send = all_reduce(0, 100);
  send.api = static_cast<uint16_t>(Api::ncclSend);
  send.flags = kInGroup | kPointToPoint | kSend;
  send.peer = 1;
  send.sequence = 7;  // its number among this rank's sends to rank 1
  EventRecord recv = send;
  recv.api = static_cast<uint16_t>(Api::ncclRecv);
  recv.flags = kInGroup | kPointToPoint;
  recv.begin_ticks = 110;
  recv.end_ticks = 120;
  EventRecord later_send = send;
  later_send.peer = 3;
  later_send.sequence = 2;
  later_send.begin_ticks = 130;
  later_send.end_ticks = 140;
  // Two all-reduces of one group on one stream: one operation (they share the number).
  EventRecord grouped = all_reduce(9, 150);
  grouped.flags = kInGroup;
  EventRecord grouped_second = all_reduce(9, 160);
  grouped_second.flags = kInGroup;
  for (const EventRecord& r : {send, recv, later_send, grouped, grouped_second}) ASSERT_TRUE(seg.ring(0).push(r));
  Collector collector(options());
  EXPECT_EQ(collector.pass(), 5u);
  EventRecord timing = timing_of(send, 9'000);
  timing.flags |= kExchange | kGroupInProgress;
  timing.sequence = 4;  // the exchange's number on the communicator
  ASSERT_TRUE(seg.ring(1).push(timing));
  ASSERT_TRUE(seg.ring(1).push(timing_of(grouped, 3'000)));
  EXPECT_EQ(collector.pass(), 2u);
  EXPECT_EQ(
      rows("SELECT sequence, peer, flags, coalesce(gpu_ns, 'none'), exchange FROM events ORDER BY rowid"),
      (std::vector<std::vector<std::string>>{
          {"7", "1", std::to_string(kInGroup | kPointToPoint | kSend | kExchange | kGroupInProgress), "9000", "4"},
          {"7", "1", std::to_string(kInGroup | kPointToPoint), "none", "0"},
          {"2", "3", std::to_string(kInGroup | kPointToPoint | kSend), "none", "0"},
          {"9", "0", std::to_string(kInGroup), "3000", "0"},
          {"9", "0", std::to_string(kInGroup), "none", "0"}}));
}

// A collector replacing a dead one carries on with what the dead one's rows wait for: a timing
// read after the restart lands in its collective's row, one the dead one held is folded when its
// collective comes, and a Python stack published after the restart names the strings published
// before it.
TEST_F(CollectorTest, ACollectorReplacingADeadOneFoldsLaterTimingsAndNamesLaterStacks) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(all_reduce(1, 100)));
  ASSERT_TRUE(seg.ring(1).push(timing_of(all_reduce(2, 300), 6'000)));  // its collective not read yet
  const auto text = [](uint32_t id, const std::string& s) {
    SideRecord r{};
    r.kind = uint16_t(SideKind::String);
    r.id = id;
    r.count = uint16_t(s.size());
    std::memcpy(r.text, s.data(), s.size());
    return r;
  };
  ASSERT_TRUE(seg.side_ring().push(text(1, "/job/train.py")));
  ASSERT_TRUE(seg.side_ring().push(text(2, "train_step")));
  {
    Collector first(options());
    EXPECT_EQ(first.pass(), 2u);
  }
  EXPECT_EQ(value(kTimingRows), 1);
  ASSERT_TRUE(seg.ring(0).push(all_reduce(2, 300)));
  ASSERT_TRUE(seg.ring(1).push(timing_of(all_reduce(1, 100), 4'000)));
  SideRecord stack{};
  stack.kind = uint16_t(SideKind::PythonStack);
  stack.id = 1;
  stack.count = 1;
  stack.python[0] = {1, 2, 57, 0};
  ASSERT_TRUE(seg.side_ring().push(stack));

  Collector second(options());
  EXPECT_EQ(second.pass(), 2u);
  EXPECT_EQ(value("SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(rows("SELECT sequence, coalesce(gpu_ns, 'none') FROM events ORDER BY rowid"),
            (std::vector<std::vector<std::string>>{{"1", "4000"}, {"2", "6000"}}));
  EXPECT_EQ(value(kTimingRows), 0);
  EXPECT_EQ(value(kTimingsCounted), 2);
  EXPECT_EQ(rows("SELECT file, function, line FROM python_frames"),
            (std::vector<std::vector<std::string>>{{"/job/train.py", "train_step", "57"}}));
  EXPECT_EQ(rows("SELECT id, text FROM python_strings ORDER BY id"),
            (std::vector<std::vector<std::string>>{{"1", "/job/train.py"}, {"2", "train_step"}}));
}

// --- The GPU timeline: CUPTI's activity records as the shim writes them ------------------------

SideRecord string_record(uint32_t id, const std::string& text) {
  SideRecord r{};
  r.kind = uint16_t(SideKind::String);
  r.id = id;
  r.count = uint16_t(text.size());
  std::memcpy(r.text, text.data(), text.size());
  return r;
}

// A record of the GPU's own activity, its fields as protocol.hpp lays them out.
EventRecord gpu_record(Api api, uint64_t start, uint64_t end, uint32_t device, uint64_t stream, uint64_t correlation) {
  EventRecord r{};
  r.api = uint16_t(api);
  r.begin_ticks = start;
  r.end_ticks = end;
  r.sequence = device;
  r.stream = stream;
  r.object = correlation;
  return r;
}
EventRecord gpu_kernel(uint64_t start, uint64_t end, uint32_t name, uint64_t correlation) {
  EventRecord r = gpu_record(Api::gpuKernel, start, end, 1, 7, correlation);
  r.detail = name;
  return r;
}
EventRecord gpu_copy(uint64_t start, uint64_t end, uint64_t bytes, Direction d, HostMemory m, uint64_t correlation) {
  EventRecord r = gpu_record(Api::gpuMemcpy, start, end, 1, 13, correlation);
  r.bytes = bytes;
  r.direction = uint8_t(d);
  r.host_memory = uint8_t(m);
  return r;
}

// Written with the shim's own Recorder, from a thread of their own as the shim's activity thread
// writes them (a thread takes a ring of the segment it first records into, and keeps it).
void record_as_the_shim(TestSegment& seg, const std::vector<EventRecord>& records) {
  std::thread writer([&] {
    shim::Recorder recorder(seg.header());
    for (const EventRecord& record : records)
      recorder.record(shim::thread_state(), [&](EventRecord& slot) { slot = record; });
  });
  writer.join();
}

constexpr const char* kGpuRows =
    "SELECT a.name, g.start_ns, g.end_ns, g.device, g.stream, g.bytes, g.direction, g.host_memory, g.name, "
    "coalesce(s.text, ''), g.correlation FROM gpu_activities g JOIN apis a ON a.id = g.api LEFT JOIN python_strings s "
    "ON s.process_id = g.process_id AND s.id = g.name ORDER BY g.rowid";

TEST_F(CollectorTest, GpuActivityRecordsAreRowsOfGpuActivitiesNamedThroughTheProcesssStrings) {
  TestSegment seg(job_, Opts());
  // The kernel's name shares the process's string ids with the file and function names of its
  // Python frames: published once as a side record before the first record that names it.
  ASSERT_TRUE(seg.side_ring().push(string_record(1, "/job/train.py")));
  ASSERT_TRUE(seg.side_ring().push(string_record(2, "train_step")));
  ASSERT_TRUE(seg.side_ring().push(string_record(3, "ampere_sgemm_128x64_nn")));
  record_as_the_shim(seg, {gpu_kernel(10'000, 14'000, 3, 41),
                           gpu_copy(15'000, 15'800, 4096, Direction::HostToDevice, HostMemory::Pageable, 42),
                           gpu_record(Api::gpuMemset, 16'000, 16'100, 0, 9, 43), gpu_kernel(17'000, 17'500, 3, 44)});
  seg.header()->gpu_records_dropped.store(5);
  seg.header()->gpu_timeline.store(uint32_t(GpuTimeline::On));

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 4u);
  const std::string h2d = std::to_string(int(Direction::HostToDevice));
  const std::string pageable = std::to_string(int(HostMemory::Pageable));
  // Times on the host's CLOCK_MONOTONIC as the events' (this segment's ticks are nanoseconds).
  EXPECT_EQ(rows(kGpuRows),
            (std::vector<std::vector<std::string>>{
                {"gpuKernel", "10000", "14000", "1", "7", "0", "0", "0", "3", "ampere_sgemm_128x64_nn", "41"},
                {"gpuMemcpy", "15000", "15800", "1", "13", "4096", h2d, pageable, "0", "", "42"},
                {"gpuMemset", "16000", "16100", "0", "9", "0", "0", "0", "0", "", "43"},
                {"gpuKernel", "17000", "17500", "1", "7", "0", "0", "0", "3", "ampere_sgemm_128x64_nn", "44"}}));
  // Counted in `calls` as every record is (the GPU's own time), kept nowhere else.
  EXPECT_EQ(rows("SELECT a.name, c.count, c.bytes, c.total_ns, c.max_ns, c.first_begin_ns, c.last_end_ns FROM calls c "
                 "JOIN apis a ON a.id = c.api ORDER BY c.first_begin_ns"),
            (std::vector<std::vector<std::string>>{{"gpuKernel", "2", "0", "4500", "4000", "10000", "17500"},
                                                   {"gpuMemcpy", "1", "4096", "800", "800", "15000", "15800"},
                                                   {"gpuMemset", "1", "0", "100", "100", "16000", "16100"}}));
  EXPECT_EQ(value("SELECT count(*) FROM events"), 0);
  EXPECT_EQ(value("SELECT count(*) FROM recent_events"), 0);
  EXPECT_EQ(rows("SELECT events, gpu_records_dropped, gpu_records_not_kept, gpu_timeline FROM processes"),
            (std::vector<std::vector<std::string>>{{"4", "5", "0", "on"}}));
}

TEST_F(CollectorTest, TheProcesssGpuTimelineStateIsItsHeadersAsItChanges) {
  TestSegment seg(job_, Opts());
  Collector collector(options());
  collector.pass();
  EXPECT_EQ(rows("SELECT gpu_timeline, gpu_records_dropped FROM processes"),
            (std::vector<std::vector<std::string>>{{"", "0"}}))
      << "not started";
  seg.header()->gpu_timeline.store(uint32_t(GpuTimeline::Taken));
  collector.pass();
  EXPECT_EQ(value("SELECT count(*) FROM processes WHERE gpu_timeline = 'taken'"), 1);
  seg.header()->gpu_timeline.store(uint32_t(GpuTimeline::Yielded));
  seg.header()->gpu_records_dropped.store(12);
  collector.pass();
  EXPECT_EQ(rows("SELECT gpu_timeline, gpu_records_dropped FROM processes"),
            (std::vector<std::vector<std::string>>{{"yielded", "12"}}));
  // A value no shim writes is no state at all.
  seg.header()->gpu_timeline.store(kGpuTimelineCount);
  collector.pass();
  EXPECT_EQ(rows("SELECT gpu_timeline FROM processes"), (std::vector<std::vector<std::string>>{{""}}));
}

TEST_F(CollectorTest, GpuActivityRowsStopAtTheirBoundAndTheRestAreCountedNotKept) {
  TestSegment seg(job_, Opts());
  CollectorOptions o = options();
  o.gpu_rows = 3;
  {
    Collector collector(o);
    record_as_the_shim(seg, {gpu_kernel(1'000, 2'000, 0, 1), gpu_kernel(3'000, 4'000, 0, 2)});
    EXPECT_EQ(collector.pass(), 2u);
    record_as_the_shim(
        seg, {gpu_kernel(5'000, 6'000, 0, 3), gpu_kernel(7'000, 8'000, 0, 4), gpu_kernel(9'000, 10'000, 0, 5)});
    EXPECT_EQ(collector.pass(), 3u);
    EXPECT_EQ(rows("SELECT correlation FROM gpu_activities ORDER BY rowid"),
              (std::vector<std::vector<std::string>>{{"1"}, {"2"}, {"3"}}))
        << "the first ones are kept";
    EXPECT_EQ(rows("SELECT events, gpu_records_not_kept FROM processes"),
              (std::vector<std::vector<std::string>>{{"5", "2"}}));
    EXPECT_EQ(value("SELECT sum(count) FROM calls"), 5) << "every one is counted";
  }
  // A collector that carries on with the row (the first one died) counts the rows it finds
  // against the bound, and adds to the count of those not kept.
  record_as_the_shim(seg, {gpu_kernel(11'000, 12'000, 0, 6)});
  o.gpu_rows = 4;
  Collector second(o);
  EXPECT_EQ(second.pass(), 1u);
  record_as_the_shim(seg, {gpu_kernel(13'000, 14'000, 0, 7)});
  EXPECT_EQ(second.pass(), 1u);
  EXPECT_EQ(rows("SELECT correlation FROM gpu_activities ORDER BY rowid"),
            (std::vector<std::vector<std::string>>{{"1"}, {"2"}, {"3"}, {"6"}}));
  EXPECT_EQ(rows("SELECT count(*), events, gpu_records_not_kept FROM processes"),
            (std::vector<std::vector<std::string>>{{"1", "7", "3"}}));
}

TEST_F(CollectorTest, NoGpuActivityRowIsKeptWhenTheBoundIsZero) {
  TestSegment seg(job_, Opts());
  CollectorOptions o = options();
  o.gpu_rows = 0;
  Collector collector(o);
  record_as_the_shim(seg, {gpu_kernel(1'000, 2'000, 0, 1),
                           gpu_copy(3'000, 4'000, 64, Direction::DeviceToHost, HostMemory::Pinned, 2)});
  EXPECT_EQ(collector.pass(), 2u);
  EXPECT_EQ(value("SELECT count(*) FROM gpu_activities"), 0);
  EXPECT_EQ(value("SELECT gpu_records_not_kept FROM processes"), 2);
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 2);
}

// The copies that carry stacks (a host sync, pageable memory) are kept one by one: the report
// needs their times to tell what the host was doing in the GPU's idle gaps. The others stay in the
// window of recent copies, never in both.
TEST_F(CollectorTest, CopiesWithStacksAreKeptInEventsTheOthersOnlyInTheRecentWindow) {
  TestSegment seg(job_, Opts());
  EventRecord pageable = copy_record(10'000, 10'800, 4096, Direction::HostToDevice, HostMemory::Pageable);
  pageable.native_stack = 4;
  pageable.python_stack = 5;
  EventRecord blocking = copy_record(11'000, 11'300, 512, Direction::DeviceToHost, HostMemory::Pinned, Api::cudaMemcpy);
  blocking.python_stack = 6;
  const EventRecord pinned = copy_record(12'000, 12'050, 4096, Direction::HostToDevice, HostMemory::Pinned);
  record_as_the_shim(seg, {pageable, blocking, pinned});
  {
    Collector collector(options());
    EXPECT_EQ(collector.pass(), 3u);
    EXPECT_EQ(
        rows("SELECT api, begin_ns, end_ns, bytes, direction, host_memory, native_stack, python_stack FROM events "
             "ORDER BY begin_ns"),
        (std::vector<std::vector<std::string>>{
            {std::to_string(int(Api::cudaMemcpyAsync)), "10000", "10800", "4096", "1", "2", "4", "5"},
            {std::to_string(int(Api::cudaMemcpy)), "11000", "11300", "512", "2", "1", "0", "6"}}));
  }
  // Written when the collector exits: the copy without stacks alone.
  EXPECT_EQ(rows("SELECT begin_ns, end_ns, bytes FROM recent_events"),
            (std::vector<std::vector<std::string>>{{"12000", "12050", "4096"}}));
  EXPECT_EQ(value("SELECT sum(count) FROM calls"), 3);
}

// What waits for its other half is bounded: an entry is forgotten once kMaxAwaitedTimings later
// ones came, an early timing's row handed back to be deleted.
TEST(TimingFolder, AnEntryIsForgottenOnceTheBoundOfLaterOnesCame) {
  constexpr auto kMax = TimingFolder::kMaxAwaitedTimings;
  TimingFolder folder;
  for (uint32_t seq = 1; seq <= kMax + 1; ++seq) folder.await(all_reduce(seq, 0), seq * 1000, int64_t(seq));
  EXPECT_EQ(folder.awaiting(), kMax);
  EXPECT_EQ(folder.take_collective(timing_of(all_reduce(1, 0), 1), 1000), std::nullopt) << "forgotten";
  EXPECT_EQ(folder.take_collective(timing_of(all_reduce(2, 0), 1), 2000), std::optional<int64_t>(2));
  EXPECT_EQ(folder.take_collective(timing_of(all_reduce(2, 0), 1), 2000), std::nullopt) << "taken once";

  for (uint32_t seq = 1; seq <= kMax + 1; ++seq)
    folder.hold_early(timing_of(all_reduce(seq, 0), seq), seq * 1000, int64_t(100'000 + seq));
  EXPECT_EQ(folder.take_dropped_early(), std::vector<int64_t>{100'001});
  EXPECT_EQ(folder.take_dropped_early(), std::vector<int64_t>{});
  const std::optional<TimingFolder::Early> early = folder.take_early(all_reduce(7, 0), 7000);
  ASSERT_TRUE(early.has_value());
  EXPECT_EQ(early->row, 100'007);
  EXPECT_EQ(early->timing.gpu_ns, 7u);
  EXPECT_EQ(folder.clear().size(), kMax - 1) << "the rows of the early timings still held";
  EXPECT_EQ(folder.awaiting() + folder.early(), 0u);
}

TEST(DurationHistogram, SummarySaysCountMeanLongestAndTheNonEmptyBucketsAboveTheFirst) {
  using std::chrono::microseconds;
  DurationHistogram h;
  EXPECT_EQ(h.summary(), "0");
  for (int us : {100, 200, 300, 5'000, 70'000}) h.add(microseconds(us));
  EXPECT_EQ(h.count(), 5u);
  EXPECT_EQ(h.longest_ns(), 70'000'000u);
  EXPECT_EQ(h.buckets(), (std::array<uint64_t, 6>{2, 1, 0, 1, 0, 1}));
  EXPECT_EQ(h.summary(), "5, mean 15.120 ms, longest 70.000 ms, 0.25-1 ms: 1, 4-16 ms: 1, 64 ms and more: 1");
}

TEST_F(CollectorTest, TheCollectorLogsHowLongItsPassesTookWhenItStops) {
  TestSegment seg(job_, Opts());
  ASSERT_TRUE(seg.ring(0).push(copy_record(1, 2, 64, Direction::HostToDevice, HostMemory::Pinned)));
  {
    Collector collector(options());
    EXPECT_EQ(collector.pass(), 1u);
    EXPECT_EQ(collector.pass(), 0u);
    EXPECT_EQ(collector.timings().pass.count(), 2u);
    EXPECT_EQ(collector.timings().cycle.count(), 1u);
    EXPECT_EQ(collector.timings().commit.count(), 2u);
    EXPECT_EQ(collector.timings().discover.count(), 2u);
    EXPECT_EQ(collector.timings().recent.count(), 0u) << "the window is queued every 10 s";
  }
  EXPECT_EQ(value("SELECT count(*) FROM collector_log WHERE level = 'info' AND message LIKE 'passes: 2, mean %; "
                  "pass to pass: 1, mean %; commits: 2, mean %; recent-window slices: 0; discoveries: 2, mean %; WAL "
                  "checkpoints: 0'"),
            1);
}

// --- The sampler: thread samples, the process's census, its setup facts ------------------------

// A Sample record as the shim's sampler writes it (protocol.hpp): `syscall` -1 for none.
EventRecord thread_sample(uint32_t tid, uint64_t at, uint32_t tick, char state, int64_t syscall, uint32_t stack) {
  EventRecord r{};
  r.api = uint16_t(Api::threadSample);
  r.begin_ticks = at;
  r.end_ticks = at + 40;
  r.tid = tid;
  r.object = uint8_t(state);
  r.detail = uint64_t(syscall + 1);
  r.sequence = tick;
  r.python_stack = stack;
  return r;
}

EventRecord census_record(uint64_t at, uint64_t threads, uint64_t workers, uint64_t workers_cpu_ns,
                          uint32_t workers_seen, uint32_t other_children) {
  EventRecord r{};
  r.api = uint16_t(Api::processSample);
  r.begin_ticks = at;
  r.end_ticks = at + 100;
  r.bytes = threads;
  r.object = workers;
  r.detail = workers_cpu_ns;
  r.sequence = workers_seen;
  r.rank_in_comm = other_children;
  return r;
}

SideRecord facts_record(uint32_t id, const std::string& text) {
  SideRecord r{};
  r.kind = uint16_t(SideKind::Facts);
  r.id = id;
  r.count = uint16_t(text.size());
  std::memcpy(r.text, text.data(), text.size());
  return r;
}

using Rows = std::vector<std::vector<std::string>>;
constexpr const char* kSampleRows = "SELECT tid, at_ns, tick, state, syscall, python_stack FROM samples ORDER BY rowid";
constexpr const char* kThreadNow =
    "SELECT at_ns, at_unix_ns, state, syscall, python_stack, since_ns FROM threads_now WHERE tid = ";

TEST_F(CollectorTest, SamplesAreRowsOfSamplesAndThreadsNowHoldsEachThreadsLatestSinceItsStackChanged) {
  TestSegment seg(job_, Opts());
  const uint32_t main = uint32_t(getpid());
  const std::string main_tid = std::to_string(main);
  seg.header()->sampler.store(uint32_t(SamplerState::On));
  seg.header()->sample_hz.store(50);
  seg.header()->samples_torn.store(3);
  for (const EventRecord& r :
       {thread_sample(main, 10'000, 1, 'S', 202, 5), thread_sample(901, 10'100, 1, 'R', -1, 0),
        census_record(15'000, 7, 2, 5'000'000, 4, 1), thread_sample(main, 20'000, 2, 'S', 202, 5),
        thread_sample(901, 20'100, 2, 'D', 0, 0), thread_sample(main, 30'000, 3, 'S', 202, 6),
        census_record(35'000, 5, 3, 9'000'000, 6, 0)})
    ASSERT_TRUE(seg.ring(0).push(r));

  Collector collector(options());
  EXPECT_EQ(collector.pass(), 7u);
  EXPECT_EQ(rows(kSampleRows), (Rows{{main_tid, "10000", "1", "S", "202", "5"},
                                     {"901", "10100", "1", "R", "-1", "0"},
                                     {main_tid, "20000", "2", "S", "202", "5"},
                                     {"901", "20100", "2", "D", "0", "0"},
                                     {main_tid, "30000", "3", "S", "202", "6"}}));
  // Its stack changed at 30 µs; CLOCK_REALTIME from the segment's anchors (5 µs <-> 1.7e18 ns).
  EXPECT_EQ(rows(kThreadNow + main_tid), (Rows{{"30000", "1700000000000025000", "S", "202", "6", "30000"}}));
  EXPECT_EQ(rows(kThreadNow + std::string("901")), (Rows{{"20100", "1700000000000015100", "D", "0", "0", "20100"}}));
  // The latest census, and the most threads and workers seen.
  EXPECT_EQ(rows("SELECT key, value FROM process_facts ORDER BY key"), (Rows{{"other_children", "0"},
                                                                             {"threads", "5"},
                                                                             {"threads_max", "7"},
                                                                             {"workers", "3"},
                                                                             {"workers_cpu_ns", "9000000"},
                                                                             {"workers_max", "3"},
                                                                             {"workers_seen", "6"}}));
  // Counted in `calls` as every record is, kept nowhere else.
  EXPECT_EQ(
      rows("SELECT a.name, sum(c.count) FROM calls c JOIN apis a ON a.id = c.api GROUP BY a.name ORDER BY a.name"),
      (Rows{{"processSample", "2"}, {"threadSample", "5"}}));
  EXPECT_EQ(value("SELECT count(*) FROM events"), 0);
  EXPECT_EQ(rows("SELECT events, sampler, sample_hz, samples_torn, samples_not_kept, malformed FROM processes"),
            (Rows{{"7", "on", "50", "3", "0", "0"}}));

  // The same stack, state and call again: the thread is there since 30 µs. A state that is no
  // letter and a call past any number are unknown.
  EventRecord garbled = thread_sample(901, 50'000, 5, 'S', 0, 0);
  garbled.object = 200;
  garbled.detail = 9999;
  EventRecord control_character = thread_sample(902, 50'100, 5, '\x07', -1, 0);
  for (const EventRecord& r : {thread_sample(main, 40'000, 4, 'S', 202, 6), garbled, control_character})
    ASSERT_TRUE(seg.ring(1).push(r));
  EXPECT_EQ(collector.pass(), 3u);
  EXPECT_EQ(rows(kThreadNow + main_tid), (Rows{{"40000", "1700000000000035000", "S", "202", "6", "30000"}}));
  EXPECT_EQ(rows(kThreadNow + std::string("901")), (Rows{{"50000", "1700000000000045000", "", "-1", "0", "50000"}}));
  EXPECT_EQ(rows("SELECT tid, state, syscall FROM samples WHERE tick = 5 ORDER BY rowid"),
            (Rows{{"901", "", "-1"}, {"902", "", "-1"}}));
  EXPECT_EQ(value("SELECT count(*) FROM samples"), 8);
  EXPECT_EQ(value("SELECT count(*) FROM process_facts"), 7) << "no census came: nothing rewritten, nothing added";
}

TEST_F(CollectorTest, SampleRowsStopAtTheirBoundTheRestCountedAndThreadsNowGoesOn) {
  TestSegment seg(job_, Opts());
  const uint32_t main = uint32_t(getpid());
  const std::string main_tid = std::to_string(main);
  CollectorOptions o = options();
  o.sample_rows = 2;
  {
    Collector collector(o);
    for (const EventRecord& r : {thread_sample(main, 1'000, 1, 'S', 35, 3), thread_sample(main, 2'000, 2, 'S', 35, 3),
                                 thread_sample(main, 3'000, 3, 'R', -1, 4)})
      ASSERT_TRUE(seg.ring(0).push(r));
    EXPECT_EQ(collector.pass(), 3u);
    EXPECT_EQ(rows("SELECT tick FROM samples ORDER BY rowid"), (Rows{{"1"}, {"2"}})) << "the first ones are kept";
    EXPECT_EQ(rows("SELECT events, samples_not_kept FROM processes"), (Rows{{"3", "1"}}));
    EXPECT_EQ(value("SELECT sum(count) FROM calls"), 3) << "every one is counted";
    EXPECT_EQ(rows(kThreadNow + main_tid), (Rows{{"3000", "1699999999999998000", "R", "-1", "4", "3000"}}));
  }
  // A collector that carries on with the row (the first one died) counts the rows it finds against
  // the bound, adds to the count of those not kept, and goes on with each thread's run of samples.
  o.sample_rows = 3;
  Collector second(o);
  for (const EventRecord& r : {thread_sample(main, 4'000, 4, 'R', -1, 4), thread_sample(main, 5'000, 5, 'R', -1, 4)})
    ASSERT_TRUE(seg.ring(0).push(r));
  EXPECT_EQ(second.pass(), 2u);
  EXPECT_EQ(rows("SELECT tick FROM samples ORDER BY rowid"), (Rows{{"1"}, {"2"}, {"4"}}));
  EXPECT_EQ(rows("SELECT count(*), events, samples_not_kept FROM processes"), (Rows{{"1", "5", "2"}}));
  EXPECT_EQ(rows(kThreadNow + main_tid), (Rows{{"5000", "1700000000000000000", "R", "-1", "4", "3000"}}));
}

TEST_F(CollectorTest, NoSampleRowIsKeptWhenTheBoundIsZero) {
  TestSegment seg(job_, Opts());
  CollectorOptions o = options();
  o.sample_rows = 0;
  Collector collector(o);
  ASSERT_TRUE(seg.ring(0).push(thread_sample(77, 1'000, 1, 'S', 7, 0)));
  ASSERT_TRUE(seg.ring(0).push(thread_sample(77, 2'000, 2, 'S', 7, 0)));
  EXPECT_EQ(collector.pass(), 2u);
  EXPECT_EQ(value("SELECT count(*) FROM samples"), 0);
  EXPECT_EQ(value("SELECT samples_not_kept FROM processes"), 2);
  EXPECT_EQ(rows(kThreadNow + std::string("77")), (Rows{{"2000", "1699999999999997000", "S", "7", "0", "1000"}}));
}

// Facts records: "key=value\n" lines, each checked; what is not a fact is counted as malformed.
TEST_F(CollectorTest, FactsLinesAreRowsOfProcessFactsAndGarbageLinesAreCountedMalformed) {
  TestSegment seg(job_, Opts());
  const std::string key64(64, 'k'), key65(65, 'q');
  ASSERT_TRUE(seg.side_ring().push(
      facts_record(1, "affinity=0-15\ngpu_numa_node=1\nenv.NCCL_P2P_DISABLE=1\n bad line\nthreads=9\nnoequals\n=empty\n"
                      "key=\x01ctl\naffinity=0-7\n")));
  ASSERT_TRUE(seg.side_ring().push(facts_record(2, key64 + "=x\n" + key65 + "=y\ndevice=3")));
  ASSERT_TRUE(seg.side_ring().push(facts_record(3, "v=" + std::string(1000, 'v') + "\n")));
  ASSERT_TRUE(seg.side_ring().push(facts_record(4, "w=" + std::string(1001, 'w') + "\n")));
  Collector collector(options());
  collector.pass();
  EXPECT_EQ(rows("SELECT key, value FROM process_facts ORDER BY key"), (Rows{{"affinity", "0-7"},
                                                                             {"env.NCCL_P2P_DISABLE", "1"},
                                                                             {"gpu_numa_node", "1"},
                                                                             {key64, "x"},
                                                                             {"v", std::string(1000, 'v')}}));
  // " bad line", "threads=9" (a census key), "noequals", "=empty", a control character; a key of
  // 65 bytes, "device=3" without its end of line; a value of 1001 bytes.
  EXPECT_EQ(value("SELECT malformed FROM processes"), 8);
}

TEST_F(CollectorTest, TheProcesssSamplerStateAndRateAreItsHeadersWhenTheyMeanSomething) {
  TestSegment seg(job_, Opts());
  Collector collector(options());
  collector.pass();
  EXPECT_EQ(rows("SELECT sampler, sample_hz, samples_torn FROM processes"), (Rows{{"", "0", "0"}})) << "not started";
  seg.header()->sampler.store(uint32_t(SamplerState::Failed));
  collector.pass();
  EXPECT_EQ(rows("SELECT sampler, sample_hz FROM processes"), (Rows{{"failed", "0"}}));
  seg.header()->sampler.store(uint32_t(SamplerState::On));
  seg.header()->sample_hz.store(1000);
  seg.header()->samples_torn.store(12);
  collector.pass();
  EXPECT_EQ(rows("SELECT sampler, sample_hz, samples_torn FROM processes"), (Rows{{"on", "1000", "12"}}));
  // Values no shim writes.
  seg.header()->sampler.store(kSamplerStateCount);
  seg.header()->sample_hz.store(1001);
  collector.pass();
  EXPECT_EQ(rows("SELECT sampler, sample_hz FROM processes"), (Rows{{"", "0"}}));
}

// --- Hangs, with what the ranks are doing now ----------------------------------------------------

// Seconds depend on this host's clock (the records' times are near its boot): said as "N s".
std::string without_seconds(const std::string& text) {
  return std::regex_replace(text, std::regex("[0-9]+ s\\b"), "N s");
}

constexpr uint64_t kHungComm = 0xC0FFEE;

EventRecord comm_init_record(uint32_t rank, uint64_t at) {
  EventRecord r{};
  r.api = uint16_t(Api::ncclCommInitRank);
  r.begin_ticks = at;
  r.end_ticks = at + 100;
  r.object = 0x5000 + rank;
  r.detail = kHungComm;
  r.rank_in_comm = rank;
  r.comm_size = 2;
  return r;
}

// Rank 1's main thread (pid 12) sleeps in futex in get_batch, its stack published as the shim does.
void rank_one_sleeps_in_get_batch(TestSegment& seg) {
  ASSERT_TRUE(seg.side_ring().push(string_record(1, "/job/loader.py")));
  ASSERT_TRUE(seg.side_ring().push(string_record(2, "get_batch")));
  ASSERT_TRUE(seg.side_ring().push(string_record(3, "<module>")));
  SideRecord stack{};
  stack.kind = uint16_t(SideKind::PythonStack);
  stack.id = 1;
  stack.count = 2;
  stack.python[0] = {1, 2, 41, 0};
  stack.python[1] = {1, 3, 7, 0};
  ASSERT_TRUE(seg.side_ring().push(stack));
  ASSERT_TRUE(seg.ring(0).push(thread_sample(12, 20'000, 1, 'S', 202, 1)));
}

constexpr const char* kRankOneStack = "rank 1 (pid 12) thread 12 sleeping in futex for N s\n"
                                      "    at get_batch (/job/loader.py:41)\n"
                                      "    at <module> (/job/loader.py:7)";

TEST_F(CollectorTest, AHangOnTheFirstCollectiveNamesTheMissingRanksCurrentStack) {
  TestSegment rank0(job_, Opts().with_pid(11));
  TestSegment rank1(job_, Opts().with_pid(12));
  rank0.header()->rank = 0;
  rank1.header()->rank = 1;
  for (TestSegment* seg : {&rank0, &rank1}) seg->header()->sampler.store(uint32_t(SamplerState::On));
  ASSERT_TRUE(rank0.ring(0).push(comm_init_record(0, 1'000)));
  EventRecord first = comm_init_record(0, 10'000);
  first.api = uint16_t(Api::ncclAllReduce);
  first.object = kHungComm;
  first.detail = 0;
  first.sequence = 1;
  ASSERT_TRUE(rank0.ring(0).push(first));
  ASSERT_TRUE(rank1.ring(0).push(comm_init_record(1, 2'000)));
  rank_one_sleeps_in_get_batch(rank1);

  CollectorOptions o = options();
  o.hang = std::chrono::milliseconds(0);
  Collector collector(o);
  collector.pass();
  const Rows hangs = rows("SELECT communicator, sequence, kind, op, waiting_ranks, missing_ranks, message, stacks "
                          "FROM hangs");
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(std::vector<std::string>(hangs[0].begin(), hangs[0].begin() + 6),
            (std::vector<std::string>{"0000000000c0ffee", "1", "collective", "ncclAllReduce", "0", "1"}));
  EXPECT_EQ(without_seconds(hangs[0][6]),
            "ncclAllReduce #1 on communicator 0000000000c0ffee: rank 0 waiting for N s; rank 1 never entered it; "
            "rank 1's last activity: ncclCommInitRank, N s ago; rank 1 main thread sleeping in futex for N s at "
            "/job/loader.py:41 in get_batch");
  EXPECT_EQ(without_seconds(hangs[0][7]), kRankOneStack) << "rank 0 was never sampled";
}

TEST_F(CollectorTest, AJobWhoseRanksAllStandStillWithNoCollectivePendingIsANoProgressHang) {
  TestSegment rank0(job_, Opts().with_pid(11));
  TestSegment rank1(job_, Opts().with_pid(12));
  rank0.header()->rank = 0;
  rank1.header()->rank = 1;
  for (TestSegment* seg : {&rank0, &rank1}) seg->header()->sampler.store(uint32_t(SamplerState::On));
  ASSERT_TRUE(rank0.ring(0).push(thread_sample(11, 20'000, 1, 'S', 7, 0)));
  rank_one_sleeps_in_get_batch(rank1);

  CollectorOptions o = options();
  o.hang = std::chrono::milliseconds(0);
  Collector collector(o);
  collector.pass();
  const Rows hangs = rows("SELECT communicator, sequence, kind, op, waiting_ranks, missing_ranks, message, stacks "
                          "FROM hangs");
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(std::vector<std::string>(hangs[0].begin(), hangs[0].begin() + 6),
            (std::vector<std::string>{"", "0", "no_progress", "", "0,1", ""}));
  EXPECT_EQ(without_seconds(hangs[0][6]),
            "no rank progressed for N s and no collective is pending: rank 0 main thread sleeping in poll for N s; "
            "rank 1 main thread sleeping in futex for N s at /job/loader.py:41 in get_batch");
  EXPECT_EQ(without_seconds(hangs[0][7]),
            "rank 0 (pid 11) thread 11 sleeping in poll for N s\n" + std::string(kRankOneStack));
}

// Without a sampler nothing tells a process that stands still from one that runs without calls.
TEST_F(CollectorTest, NoNoProgressHangOfProcessesWhoseSamplerIsOff) {
  TestSegment seg(job_, Opts().with_pid(11));
  seg.header()->sampler.store(uint32_t(SamplerState::Off));
  ASSERT_TRUE(seg.ring(0).push(copy_record(1'000, 2'000, 64, Direction::HostToDevice, HostMemory::Pinned)));
  CollectorOptions o = options();
  o.hang = std::chrono::milliseconds(0);
  Collector collector(o);
  collector.pass();
  EXPECT_EQ(value("SELECT count(*) FROM hangs"), 0);
}

}  // namespace
}  // namespace trainshim::collector
