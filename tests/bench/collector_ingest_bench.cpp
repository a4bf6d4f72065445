// The collector's cost per record (scripts/bench/ingest measures the steady rate end to end).
// BM_IngestRecord: the per-record path alone (clock conversion, pairing, aggregation, window).
// BM_CollectorPass: a real /dev/shm segment filled as the shim fills it, drained by
// Collector::pass() into a database, the pass's upserts and commit included.
// Each for three mixes of records, 4 threads (rings) each:
//   calls: copies (one in 16 records from pageable memory, with the stacks of one of 4 sites), one
//          poll in 8, one sync in 64 (a training loop's host calls: mostly aggregated, the syncs
//          and pageable copies kept one by one);
//   kept:  syncs with stacks only, every one a row of `events`;
//   gpu:   the GPU's activity as the shim writes CUPTI's records: 6 kernels (of 32 names) in 8, a
//          copy, a memset, every one a row of `gpu_activities` (below the bound).
// scripts/bench/ingest --per-record prints each mix's cost as a ratio to the calls mix's.
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

enum class Mix { Calls, Kept, Gpu };

// The shim's record of the GPU's activity i, of the 4 streams' `thread`.
EventRecord gpu_activity(EventRecord r, uint64_t i, uint32_t thread) {
  r.tid = 1000;  // the shim's activity thread
  r.sequence = 0;
  r.object = i + 1;
  r.stream = 13 + thread;
  if (i % 8 == 6) {
    r.api = uint16_t(Api::gpuMemcpy);
    r.bytes = 1 << 20;
    r.direction = uint8_t(Direction::HostToDevice);
    r.host_memory = uint8_t(HostMemory::Pinned);
  } else if (i % 8 == 7) {
    r.api = uint16_t(Api::gpuMemset);
    r.bytes = 4096;
  } else {
    r.api = uint16_t(Api::gpuKernel);
    r.detail = 1 + i % 32;
  }
  return r;
}

// Record i of thread `thread` (each thread writes its own ring).
EventRecord synthetic(uint64_t i, uint32_t thread, Mix mix) {
  EventRecord r{};
  r.tid = 1000 + thread;
  r.stream = 7 + thread;
  r.begin_ticks = 1'000'000 + i * 100;
  r.end_ticks = r.begin_ticks + 40 + i % 7;
  if (mix == Mix::Gpu) return gpu_activity(r, i, thread);
  if (mix == Mix::Kept || i % 64 == 63) {
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
    r.object = 0x1000;
    // As the shim records them: a copy carries its stacks (its site) only from pageable memory.
    const bool pageable = i % 16 == 8;
    r.host_memory = uint8_t(pageable ? HostMemory::Pageable : HostMemory::Pinned);
    if (pageable) r.native_stack = uint32_t(1 + i / 16 % 4);
  }
  return r;
}

// Every GPU activity record is kept: the cost below the bound.
constexpr uint64_t kAllGpuRows = ~uint64_t{0};

void BM_IngestRecord(benchmark::State& state, Mix mix) {
  std::vector<EventRecord> records(1 << 16);
  for (std::size_t i = 0; i < records.size(); ++i) records[i] = synthetic(i, uint32_t(i / 4096 % 4), mix);
  SegmentHeader header{};
  header.clock_kind = uint32_t(ClockKind::Tsc);
  ClockCalibration clock;
  ProcessIngest ingest(20'000, kAllGpuRows);
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
BENCHMARK_CAPTURE(BM_IngestRecord, calls, Mix::Calls);
BENCHMARK_CAPTURE(BM_IngestRecord, kept, Mix::Kept);
BENCHMARK_CAPTURE(BM_IngestRecord, gpu, Mix::Gpu);

constexpr uint32_t kRings = 4, kCapacity = 1 << 16, kSide = 64;

void BM_CollectorPass(benchmark::State& state, Mix mix) {
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
  options.gpu_rows = kAllGpuRows;
  uint64_t n = 0;
  {
    Collector collector(options);
    uint64_t stored = 0;
    for (auto _ : state) {
      state.PauseTiming();
      for (uint32_t ring = 0; ring < kRings; ++ring)
        for (uint32_t i = 0; i < kCapacity; ++i) ring_of(header, ring).push(synthetic(n++, ring, mix));
      state.ResumeTiming();
      stored += collector.pass();
    }
    state.SetItemsProcessed(int64_t(stored));
  }
  // The collector closed the database into one file: what the records stored take of it.
  state.counters["db_bytes_per_record"] = double(std::filesystem::file_size(options.database_path)) / double(n);
  close(lock_fd);
  munmap(header, bytes);
  close(fd);
  shm_unlink(name.c_str());
  std::filesystem::remove_all(dir);
}
BENCHMARK_CAPTURE(BM_CollectorPass, calls, Mix::Calls)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CollectorPass, kept, Mix::Kept)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CollectorPass, gpu, Mix::Gpu)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
