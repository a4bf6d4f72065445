// The shim's added cost per hooked call: each benchmark runs once through the interposed symbol
// (run under LD_PRELOAD=libtrainshim.so) and once straight into the runtime, in the same process.
// Run it with scripts/bench/hook-overhead, which runs it three times: with the job's collector
// live (started by the shim as in a job, draining on another core), with none, and with a reader
// thread in this process draining as the collector reads (TRAINSHIM_BENCH_READER=1): the
// collector stores a few hundred thousand records a second, far fewer than a loop of calls
// makes, so only such a reader has every record really written rather than dropped.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "segment_reader.hpp"
#include "trainshim/names.hpp"

namespace {

template <class Fn>
Fn direct(const char* name) {
  void* runtime = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
  return reinterpret_cast<Fn>(runtime ? dlsym(runtime, name) : nullptr);
}

char g_pinned[4096];
char g_device[4096];
const auto g_stream = reinterpret_cast<cudaStream_t>(0x1234);

bool two_cpus() { return sysconf(_SC_NPROCESSORS_ONLN) >= 2; }

void pin(pid_t who, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(who, sizeof set, &set);
}

// The collector this process started for its job (its command line names the job), or 0.
pid_t job_collector(const std::string& job) {
  DIR* proc = opendir("/proc");
  if (!proc) return 0;
  pid_t found = 0;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = std::atoi(entry->d_name);
    if (pid <= 0) continue;
    const int fd = open((std::string("/proc/") + entry->d_name + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buffer[4096];
    const ssize_t n = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    if (n <= 0) continue;
    std::string command(buffer, size_t(n));
    if (command.find("trainshim-collector") != std::string::npos && command.find(job + '\0') != std::string::npos)
      found = pid;
  }
  closedir(proc);
  return found;
}

// Set up before the first benchmark: the first hooked call creates the segment (and starts the
// collector, unless TRAINSHIM_SPAWN_COLLECTOR=0); then the caller runs on cpu 0 and the collector
// on cpu 1, as a job and its collector would on different cores. The segment is watched here for
// its counters, and drained only by the reader thread of TRAINSHIM_BENCH_READER=1.
class Setup {
 public:
  Setup() {
    cudaHostRegister(g_pinned, sizeof g_pinned, 0);
    const char* job = std::getenv("TRAINSHIM_JOB");
    const std::string sanitized = trainshim::sanitize_job(job ? job : "");
    try {
      segment_ =
          std::make_unique<trainshim::collector::SegmentReader>(trainshim::segment_name(getuid(), sanitized, getpid()));
    } catch (const std::exception&) {
      return;  // not preloaded
    }
    if (!two_cpus()) return;
    pin(0, 0);
    if (const char* reader = std::getenv("TRAINSHIM_BENCH_READER"); reader && std::string(reader) == "1") {
      reader_ = std::thread([this] {
        pin(0, 1);
        while (!stop_.load(std::memory_order_relaxed)) {
          const auto counts = segment_->drain([](const trainshim::EventRecord&) {}, false);
          segment_->release();
          // Nothing much to read: the collector would sleep too, rather than spin on the head.
          if (counts.records < 1024) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      });
      return;
    }
    // The collector takes its lock and moves into its own session: give it a moment to appear.
    for (int i = 0; i < 200 && !collector_; ++i) {
      collector_ = job_collector(sanitized);
      if (!collector_) usleep(10'000);
    }
    if (collector_) pin(collector_, 1);
  }
  ~Setup() {
    stop_ = true;
    if (reader_.joinable()) reader_.join();
    // A collector unlinks the segment once this process is gone; without one, nobody would.
    if (segment_ && !collector_) segment_->unlink();
  }
  uint64_t dropped() const { return segment_ ? segment_->dropped_ring_full() : 0; }
  bool collector_live() const { return collector_ != 0; }

 private:
  std::unique_ptr<trainshim::collector::SegmentReader> segment_;
  pid_t collector_ = 0;
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

Setup& setup() {
  static Setup s;
  return s;
}

void counters(benchmark::State& state) {
  state.counters["dropped"] = double(setup().dropped());
  state.counters["collector"] = setup().collector_live() ? 1 : 0;
}

void BM_PinnedCopy_Hooked(benchmark::State& state) {
  setup();
  for (auto _ : state)
    benchmark::DoNotOptimize(cudaMemcpyAsync(g_device, g_pinned, 64, cudaMemcpyHostToDevice, g_stream));
  counters(state);
}

void BM_PinnedCopy_Direct(benchmark::State& state) {
  setup();
  const auto copy =
      direct<cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t)>("cudaMemcpyAsync");
  for (auto _ : state) benchmark::DoNotOptimize(copy(g_device, g_pinned, 64, cudaMemcpyHostToDevice, g_stream));
}

// The case: a device-to-device copy, no host memory to classify.
void BM_DeviceCopy_Hooked(benchmark::State& state) {
  setup();
  for (auto _ : state)
    benchmark::DoNotOptimize(cudaMemcpyAsync(g_device, g_device + 2048, 64, cudaMemcpyDeviceToDevice, g_stream));
  counters(state);
}

void BM_DeviceCopy_Direct(benchmark::State& state) {
  setup();
  const auto copy =
      direct<cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t)>("cudaMemcpyAsync");
  for (auto _ : state)
    benchmark::DoNotOptimize(copy(g_device, g_device + 2048, 64, cudaMemcpyDeviceToDevice, g_stream));
}

// Calls in bursts at an average rate a collector keeps up with (2 M calls/s), only the bursts
// timed: the cost of a call in a job whose rings are being emptied. The loops above make about
// 50 M calls/s, which no reader drains: their rings stay full, most records are dropped, and the
// caller refills slots the reader has just read, paying for each cache line it takes back.
template <class Call>
void paced(benchmark::State& state, Call call) {
  setup();
  constexpr int kBurst = 256;
  constexpr std::chrono::nanoseconds kPeriod{kBurst * 500};
  auto next = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const auto begin = std::chrono::steady_clock::now();
    for (int i = 0; i < kBurst; ++i) benchmark::DoNotOptimize(call());
    const auto end = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(end - begin).count() / kBurst);
    next += kPeriod;
    while (std::chrono::steady_clock::now() < next) {
    }
  }
}

// The hooked and the un-hooked call in alternating bursts (which goes first alternates too), each
// burst timed on its own, the hooked calls paced at 2 M/s (`paced`) or as fast as they go. The
// added cost is the median over pairs of the two bursts' difference per call: a pair lasts a few
// microseconds, so load on the shared cores (a build, the collector's own pass) slows both halves
// or makes an outlier, where the separate runs above see it as a shift between hooked and
// un-hooked. Counters: added_ns and its 10th/90th percentiles over the pairs, hooked_ns, direct_ns.
template <class Hooked, class Direct>
void paired(benchmark::State& state, Hooked hooked, Direct direct, bool paced) {
  setup();
  constexpr int kBurst = 256;
  constexpr std::chrono::nanoseconds kPeriod{kBurst * 500};
  std::vector<double> added, hooked_ns, direct_ns;
  auto burst = [](auto call) {
    const auto begin = std::chrono::steady_clock::now();
    for (int i = 0; i < kBurst; ++i) benchmark::DoNotOptimize(call());
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - begin).count() / kBurst;
  };
  auto next = std::chrono::steady_clock::now();
  if (paced) {
    // A second at the pace first: a collector just started, or rings filled by the loops before,
    // are drained by then, and the records of the timed bursts are written rather than dropped.
    for (const auto warm = next + std::chrono::seconds(1); next < warm;) {
      burst(hooked);
      next += kPeriod;
      while (std::chrono::steady_clock::now() < next) {
      }
    }
  }
  const uint64_t dropped_before = setup().dropped();
  bool hooked_first = true;
  for (auto _ : state) {
    double with = 0, without = 0;
    if (hooked_first) {
      with = burst(hooked);
      without = burst(direct);
    } else {
      without = burst(direct);
      with = burst(hooked);
    }
    hooked_first = !hooked_first;
    state.SetIterationTime(with * 1e-9);
    added.push_back(with - without);
    hooked_ns.push_back(with);
    direct_ns.push_back(without);
    if (!paced) continue;
    next += kPeriod;
    while (std::chrono::steady_clock::now() < next) {
    }
  }
  auto percentile = [](std::vector<double>& v, double p) {
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(p * double(v.size() - 1)), v.end());
    return v[std::size_t(p * double(v.size() - 1))];
  };
  state.counters["added_ns"] = percentile(added, 0.5);
  state.counters["added_p10"] = percentile(added, 0.1);
  state.counters["added_p90"] = percentile(added, 0.9);
  state.counters["hooked_ns"] = percentile(hooked_ns, 0.5);
  state.counters["direct_ns"] = percentile(direct_ns, 0.5);
  state.counters["dropped_while_timed"] = double(setup().dropped() - dropped_before);
  counters(state);
}

using Copy = cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);

void BM_DeviceCopy_Paired(benchmark::State& state) {
  const auto copy = direct<Copy>("cudaMemcpyAsync");
  paired(
      state, [] { return cudaMemcpyAsync(g_device, g_device + 2048, 64, cudaMemcpyDeviceToDevice, g_stream); },
      [copy] { return copy(g_device, g_device + 2048, 64, cudaMemcpyDeviceToDevice, g_stream); }, state.range(0) != 0);
}

void BM_PinnedCopy_Paired(benchmark::State& state) {
  const auto copy = direct<Copy>("cudaMemcpyAsync");
  paired(
      state, [] { return cudaMemcpyAsync(g_device, g_pinned, 64, cudaMemcpyHostToDevice, g_stream); },
      [copy] { return copy(g_device, g_pinned, 64, cudaMemcpyHostToDevice, g_stream); }, state.range(0) != 0);
}

void BM_DeviceCopy_Hooked_Paced(benchmark::State& state) {
  paced(state, [] { return cudaMemcpyAsync(g_device, g_device + 2048, 64, cudaMemcpyDeviceToDevice, g_stream); });
  counters(state);
}

void BM_DeviceCopy_Direct_Paced(benchmark::State& state) {
  const auto copy =
      direct<cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t)>("cudaMemcpyAsync");
  paced(state, [copy] { return copy(g_device, g_device + 2048, 64, cudaMemcpyDeviceToDevice, g_stream); });
}

void BM_PinnedCopy_Hooked_Paced(benchmark::State& state) {
  paced(state, [] { return cudaMemcpyAsync(g_device, g_pinned, 64, cudaMemcpyHostToDevice, g_stream); });
  counters(state);
}

void BM_PinnedCopy_Direct_Paced(benchmark::State& state) {
  const auto copy =
      direct<cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t)>("cudaMemcpyAsync");
  paced(state, [copy] { return copy(g_device, g_pinned, 64, cudaMemcpyHostToDevice, g_stream); });
}

void BM_StreamSync_Hooked(benchmark::State& state) {
  setup();
  for (auto _ : state) benchmark::DoNotOptimize(cudaStreamSynchronize(g_stream));
  counters(state);
}

void BM_StreamSync_Direct(benchmark::State& state) {
  setup();
  const auto sync = direct<cudaError_t (*)(cudaStream_t)>("cudaStreamSynchronize");
  for (auto _ : state) benchmark::DoNotOptimize(sync(g_stream));
}

using Launch = cudaError_t (*)(const void*, dim3, dim3, void**, size_t, cudaStream_t);
const dim3 g_one{1, 1, 1};
const char g_kernel = 0;  // stands for a kernel's host stub

// A launch with no host sync before it on its thread: the common launch, forwarded after a thread-local read.
void BM_Launch_Paired(benchmark::State& state) {
  const auto launch = direct<Launch>("cudaLaunchKernel");
  paired(
      state, [] { return cudaLaunchKernel(&g_kernel, g_one, g_one, nullptr, 0, g_stream); },
      [launch] { return launch(&g_kernel, g_one, g_one, nullptr, 0, g_stream); }, state.range(0) != 0);
}

// The first launch after a host sync, recorded: both halves make the same hooked sync first, so the
// difference is the launch hook's own cost when it records.
void BM_LaunchAfterSync_Paired(benchmark::State& state) {
  const auto launch = direct<Launch>("cudaLaunchKernel");
  paired(
      state,
      [] {
        cudaStreamSynchronize(g_stream);
        return cudaLaunchKernel(&g_kernel, g_one, g_one, nullptr, 0, g_stream);
      },
      [launch] {
        cudaStreamSynchronize(g_stream);
        return launch(&g_kernel, g_one, g_one, nullptr, 0, g_stream);
      },
      state.range(0) != 0);
}

ncclComm_t communicator() {
  static ncclComm_t comm = [] {
    ncclUniqueId id{};
    ncclComm_t c = nullptr;
    ncclCommInitRank(&c, 2, id, 0);
    return c;
  }();
  return comm;
}

// A collective: its stacks, its number on the communicator and two timing events around it.
void BM_AllReduce_Hooked(benchmark::State& state) {
  setup();
  const ncclComm_t comm = communicator();
  for (auto _ : state)
    benchmark::DoNotOptimize(ncclAllReduce(g_device, g_device, 16, ncclFloat32, ncclSum, comm, g_stream));
  counters(state);
}

void BM_AllReduce_Direct(benchmark::State& state) {
  setup();
  using AllReduce = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  const auto all_reduce = reinterpret_cast<AllReduce>(nccl ? dlsym(nccl, "pncclAllReduce") : nullptr);
  const ncclComm_t comm = communicator();
  for (auto _ : state)
    benchmark::DoNotOptimize(all_reduce(g_device, g_device, 16, ncclFloat32, ncclSum, comm, g_stream));
}

}  // namespace

BENCHMARK(BM_AllReduce_Direct);
BENCHMARK(BM_AllReduce_Hooked);
BENCHMARK(BM_DeviceCopy_Direct);
BENCHMARK(BM_DeviceCopy_Hooked);
BENCHMARK(BM_PinnedCopy_Direct);
BENCHMARK(BM_PinnedCopy_Hooked);
BENCHMARK(BM_StreamSync_Direct);
BENCHMARK(BM_StreamSync_Hooked);
// 4,000 bursts (0.5 s) each: manual time counts only the bursts, so a time-based run would last hours.
BENCHMARK(BM_DeviceCopy_Direct_Paced)->UseManualTime()->Iterations(4000);
BENCHMARK(BM_DeviceCopy_Hooked_Paced)->UseManualTime()->Iterations(4000);
BENCHMARK(BM_PinnedCopy_Direct_Paced)->UseManualTime()->Iterations(4000);
BENCHMARK(BM_PinnedCopy_Hooked_Paced)->UseManualTime()->Iterations(4000);
// Argument 1: paced at 2 M hooked calls/s; 0: back to back.
BENCHMARK(BM_DeviceCopy_Paired)->UseManualTime()->Iterations(4000)->Arg(1)->Arg(0);
BENCHMARK(BM_PinnedCopy_Paired)->UseManualTime()->Iterations(4000)->Arg(1)->Arg(0);
BENCHMARK(BM_Launch_Paired)->UseManualTime()->Iterations(4000)->Arg(1)->Arg(0);
BENCHMARK(BM_LaunchAfterSync_Paired)->UseManualTime()->Iterations(4000)->Arg(1)->Arg(0);
BENCHMARK_MAIN();
