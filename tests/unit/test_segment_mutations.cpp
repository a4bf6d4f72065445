// Keeps the reliability review's row "libFuzzer + ASan + UBSan over SegmentReader / ProcessStacks /
// Database / HangWatch: no sanitizer report, no crash": seeded byte mutations of one segment that
// holds every kind of record, each read by a collector pass in this process, so that the
// sanitizer build (scripts/test) checks every read.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <array>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "collector.hpp"
#include "temp_dir.hpp"
#include "trainshim/names.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::collector {
namespace {

namespace bip = boost::interprocess;

constexpr uint32_t kRings = 2, kFirstCapacity = 32, kCapacity = 16, kSideCapacity = 8;
constexpr uint64_t kModuleBase = 0x400000;

void fill_header(SegmentHeader* h, const std::string& job) {
  // No process holds the segment's lock: a collector drains it in one pass, as at a job's end.
  init_segment_header(*h, kRings, kFirstCapacity, kCapacity, kSideCapacity,
                      {.pid = 4242,
                       .rank = 0,
                       .local_rank = 0,
                       .world_size = 2,
                       .clock_kind = ClockKind::Monotonic,
                       .anchor_monotonic_ns = 1000,
                       .anchor_ticks = 1000,
                       .anchor_realtime_ns = 1'700'000'000'000'000'000,
                       .host = "mutation-host",
                       .job = job,
                       .command = "python train.py"});
  h->producer_state.store(static_cast<uint32_t>(ProducerState::Exited));
}

SideRecord side(SideKind kind, uint32_t id) {
  SideRecord r{};
  r.kind = static_cast<uint16_t>(kind);
  r.id = id;
  return r;
}

SideRecord text(uint32_t id, const std::string& s) {
  SideRecord r = side(SideKind::String, id);
  r.count = uint16_t(s.size());
  std::memcpy(r.text, s.data(), s.size());
  return r;
}

EventRecord event(Api api, uint64_t begin) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(api);
  r.begin_ticks = begin;
  r.end_ticks = begin + 500;
  r.tid = 7;
  r.native_stack = 1;
  r.python_stack = 1;
  return r;
}

// A segment as a Python job on two ranks leaves it: a module, strings, a native and a Python
// stack, a pageable copy, a sync, a communicator and one all-reduce on it.
std::string seed_bytes(const std::string& job) {
  const std::string name = segment_name(getuid(), job, getpid());
  bip::permissions owner_only;
  owner_only.set_permissions(0600);
  bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, owner_only);
  shm.truncate(bip::offset_t(segment_bytes(kRings, kFirstCapacity, kCapacity, kSideCapacity)));
  bip::mapped_region region(shm, bip::read_write);
  auto* header = static_cast<SegmentHeader*>(region.get_address());
  fill_header(header, job);

  SideRecord module = side(SideKind::Module, 1);
  module.value = kModuleBase;
  module.count = 4;
  std::memcpy(module.text, "\x12\x34\x56\x78", 4);
  std::strcpy(module.text + kModulePathOffset, "/bin/true");
  SideRecord native = side(SideKind::NativeStack, 1);
  native.count = 3;
  for (uint16_t i = 0; i < native.count; ++i) native.native[i] = kModuleBase + 0x1000 * (i + 1);
  SideRecord python = side(SideKind::PythonStack, 1);
  python.count = 2;
  python.python[0] = {1, 2, 10, 0};
  python.python[1] = {1, 3, 20, 0};
  auto side_ring = side_ring_of(header);
  for (const SideRecord& r : {module, text(1, "train.py"), text(2, "step"), text(3, "<module>"), native, python})
    EXPECT_TRUE(side_ring.push(r));

  EventRecord copy = event(Api::cudaMemcpyAsync, 2000);
  copy.bytes = 4096;
  copy.direction = static_cast<uint8_t>(Direction::HostToDevice);
  copy.host_memory = static_cast<uint8_t>(HostMemory::Pageable);
  EventRecord sync = event(Api::cudaStreamSynchronize, 3000);
  EventRecord init = event(Api::ncclCommInitRank, 4000);
  init.object = 0xC0FFEE;
  init.comm_size = 2;
  EventRecord all_reduce = event(Api::ncclAllReduce, 5000);
  all_reduce.object = 0xC0FFEE;
  all_reduce.comm_size = 2;
  all_reduce.sequence = 1;
  all_reduce.bytes = 1024;
  auto ring = ring_of(header, 0);
  for (const EventRecord& r : {copy, sync, init, all_reduce}) EXPECT_TRUE(ring.push(r));

  std::string bytes(static_cast<const char*>(region.get_address()), region.get_size());
  bip::shared_memory_object::remove(name.c_str());
  return bytes;
}

void write_segment(const std::string& name, const std::string& bytes) {
  bip::permissions owner_only;
  owner_only.set_permissions(0600);
  bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, owner_only);
  shm.truncate(bip::offset_t(bytes.size()));
  bip::mapped_region region(shm, bip::read_write);
  std::memcpy(region.get_address(), bytes.data(), bytes.size());
}

int64_t count(const std::string& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  int64_t value = -1;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK &&
      sqlite3_prepare_v2(handle, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW)
    value = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  return value;
}

class SegmentMutations : public test::TempDirTest {
 protected:
  CollectorOptions options(const std::string& job, const std::string& database) const {
    CollectorOptions o;
    o.job = job;
    o.database_path = database;
    o.uid = getuid();
    o.hang = std::chrono::milliseconds(1);  // every pass also reports hangs, and stores them
    return o;
  }
};

TEST_F(SegmentMutations, SeededMutationsAreReadWithoutACrash) {
  const std::string job = "mut_" + std::to_string(getpid());
  const std::string seed = seed_bytes(job + "seed");
  // The seed itself is read whole: the mutations start from a segment that exercises every reader.
  const std::string db = dir_ + "/seed.db";
  {
    const std::string name = segment_name(getuid(), job + "seed", getpid());
    write_segment(name, seed);
    Collector collector(options(job + "seed", db));
    collector.pass();
    bip::shared_memory_object::remove(name.c_str());
  }
  ASSERT_EQ(count(db, "SELECT sum(count) FROM calls"), 4);
  ASSERT_EQ(count(db, "SELECT count(*) FROM python_frames"), 2);
  ASSERT_EQ(count(db, "SELECT count(*) FROM native_frames"), 3);
  ASSERT_EQ(count(db, "SELECT count(*) FROM modules"), 1);

  // One collector reads them all, each mutation as one more segment of its job (the names the
  // shim gives a pid's later segments), as a collector meets them.
  Collector collector(options(job, dir_ + "/mutations.db"));
  std::mt19937 random(97);
  auto below = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(random); };
  const std::size_t structured = sizeof(SegmentHeader) + event_rings_bytes(kRings, kFirstCapacity, kCapacity);
  const std::array<unsigned char, 5> special = {0, 0xff, 0x7f, 0x80, 1};
  for (int i = 1; i <= 1000; ++i) {
    SCOPED_TRACE("mutation " + std::to_string(i));
    std::string bytes = seed;
    for (std::size_t k = 1 + below(12); k > 0; --k) {
      // Most of them where records are: the header and the event rings, or the side records.
      const std::size_t at = below(4) == 0   ? below(bytes.size())
                             : below(2) == 0 ? below(structured)
                                             : structured + below(bytes.size() - structured);
      bytes[at] = char(below(3) == 0 ? special[below(special.size())] : below(256));
    }
    const std::string name = segment_name(getuid(), job, getpid()) + "." + std::to_string(i);
    write_segment(name, bytes);
    try {
      collector.pass();
      collector.pass();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the collector gave up: " << e.what();
    }
    bip::shared_memory_object::remove(name.c_str());
  }
}

}  // namespace
}  // namespace trainshim::collector
