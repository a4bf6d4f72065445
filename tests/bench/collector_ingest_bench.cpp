// The collector's cost per record (scripts/bench/ingest measures the steady rate end to end).
// BM_IngestRecord: the per-record path alone (clock conversion, pairing, aggregation, window).
// BM_CollectorPass: a real /dev/shm segment filled as the shim fills it, drained by
// Collector::pass() into a database, the pass's upserts and commit included.
// The mix: 4 threads; copies from 16 sites, one poll in 8, one sync in 64.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "clock_calibration.hpp"
#include "collector.hpp"
#include "ingest.hpp"
#include "trainshim/names.hpp"
#include "trainshim/ring.hpp"

namespace {

using namespace trainshim;
using namespace trainshim::collector;

// Record i of thread `thread` (each thread writes its own ring).
EventRecord synthetic(uint64_t i, uint32_t thread) {
  EventRecord r{};
  r.tid = 1000 + thread;
  r.stream = 7 + thread;
  r.begin_ticks = 1'000'000 + i * 100;
  r.end_ticks = r.begin_ticks + 40 + i % 7;
  if (i % 64 == 63) {
    r.api = uint16_t(Api::cudaStreamSynchronize);
    r.native_stack = 3;
    r.python_stack = 4;
  } else if (i % 8 == 7) {
    r.api = uint16_t(Api::cudaStreamQuery);
    if (i % 256 == 7) r.native_stack = 5;
  } else {
    r.api = uint16_t(Api::cudaMemcpyAsync);
    r.bytes = 4096;
    r.direction = uint8_t(Direction::HostToDevice);
    r.host_memory = uint8_t(i % 16 < 8 ? HostMemory::Pinned : HostMemory::Pageable);
    r.native_stack = uint32_t(i % 16);
    r.object = 0x1000;
  }
  return r;
}

void BM_IngestRecord(benchmark::State& state) {
  std::vector<EventRecord> records(1 << 16);
  for (std::size_t i = 0; i < records.size(); ++i) records[i] = synthetic(i, uint32_t(i / 4096 % 4));
  SegmentHeader header{};
  header.clock_kind = uint32_t(ClockKind::Tsc);
  ClockCalibration clock;
  ProcessIngest ingest(20'000);
  std::size_t i = 0;
  for (auto _ : state) {
    const EventRecord& r = records[i++ & (records.size() - 1)];
    const uint64_t begin_ns = clock.to_monotonic_ns(header, r.begin_ticks);
    benchmark::DoNotOptimize(ingest.add(r, begin_ns, clock.to_monotonic_ns(header, r.end_ticks)));
    // A pass's worth: what the collector hands to the database, then forgets.
    if ((i & 0xffff) == 0) ingest.clear_pass();
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_IngestRecord);

constexpr uint32_t kRings = 4, kCapacity = 1 << 16, kSide = 64;

void BM_CollectorPass(benchmark::State& state) {
  const std::string job = "bench_ingest_" + std::to_string(getpid());
  const std::string name = segment_name(getuid(), job, getpid());
  const uint64_t bytes = segment_bytes(kRings, kCapacity, kCapacity, kSide);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, off_t(bytes)) != 0) {
    state.SkipWithError("cannot create the segment");
    return;
  }
  auto* header = static_cast<SegmentHeader*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  init_segment_header(*header, kRings, kCapacity, kCapacity, kSide,
                      {.pid = getpid(),
                       .rank = 0,
                       .local_rank = 0,
                       .world_size = 0,
                       .clock_kind = kClockKind,
                       .anchor_monotonic_ns = clock_ns(CLOCK_MONOTONIC),
                       .anchor_ticks = ticks(),
                       .job = job});
  // The producer's liveness lock, held through another open file description.
  const int lock_fd = open((std::string(kShmDir) + "/" + name).c_str(), O_RDWR | O_CLOEXEC);
  struct flock lock {};
  lock.l_type = F_RDLCK;
  lock.l_len = 1;
  fcntl(lock_fd, F_OFD_SETLK, &lock);
  header->producer_state.store(uint32_t(ProducerState::Live), std::memory_order_release);

  const std::string dir = std::filesystem::temp_directory_path() / ("trainshim_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  CollectorOptions options;
  options.job = job;
  options.database_path = dir + "/bench.db";
  options.uid = getuid();
  {
    Collector collector(options);
    uint64_t n = 0, stored = 0;
    for (auto _ : state) {
      state.PauseTiming();
      for (uint32_t ring = 0; ring < kRings; ++ring)
        for (uint32_t i = 0; i < kCapacity; ++i) ring_of(header, ring).push(synthetic(n++, ring));
      state.ResumeTiming();
      stored += collector.pass();
    }
    state.SetItemsProcessed(int64_t(stored));
  }
  close(lock_fd);
  munmap(header, bytes);
  close(fd);
  shm_unlink(name.c_str());
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_CollectorPass)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
