// The shim's added cost per hooked call: each benchmark runs once through the interposed symbol
// (run under LD_PRELOAD=libtrainshim.so) and once straight into the runtime, in the same process.
// A thread drains this process's segment as the collector would, so records are really written
// rather than dropped on a full ring. Run it with scripts/bench/hook-overhead.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

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

void pin_to_cpu(int cpu) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

class Drain {
 public:
  Drain() {
    cudaHostRegister(g_pinned, sizeof g_pinned, 0);  // first hooked call: the segment now exists
    const char* job = std::getenv("TRAINSHIM_JOB");
    try {
      reader_ = std::make_unique<trainshim::collector::SegmentReader>(
          trainshim::segment_name(getuid(), trainshim::sanitize_job(job ? job : ""), getpid()));
    } catch (const std::exception&) {
      return;  // not preloaded: nothing to drain
    }
    // The caller on one core, the reader on another, as with the collector: sharing a core would
    // measure the scheduler.
    pin_to_cpu(0);
    thread_ = std::thread([this] {
      pin_to_cpu(1);
      // In batches, as the collector reads: a reader spinning on the producer's slots would
      // bounce their cache lines between cores and measure that instead of the hook.
      while (!stop_.load(std::memory_order_relaxed)) {
        reader_->drain([](const trainshim::EventRecord&) {}, false);
        reader_->release();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }
  ~Drain() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (reader_) reader_->unlink();
  }
  uint64_t dropped() const { return reader_ ? reader_->dropped_ring_full() : 0; }

 private:
  std::unique_ptr<trainshim::collector::SegmentReader> reader_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Drain& drain() {
  static Drain d;
  return d;
}

void BM_PinnedCopy_Hooked(benchmark::State& state) {
  drain();
  for (auto _ : state) benchmark::DoNotOptimize(cudaMemcpyAsync(g_device, g_pinned, 64, cudaMemcpyHostToDevice, g_stream));
  state.counters["dropped"] = double(drain().dropped());
}

void BM_PinnedCopy_Direct(benchmark::State& state) {
  const auto copy = direct<cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t)>("cudaMemcpyAsync");
  for (auto _ : state) benchmark::DoNotOptimize(copy(g_device, g_pinned, 64, cudaMemcpyHostToDevice, g_stream));
}

void BM_StreamSync_Hooked(benchmark::State& state) {
  drain();
  for (auto _ : state) benchmark::DoNotOptimize(cudaStreamSynchronize(g_stream));
  state.counters["dropped"] = double(drain().dropped());
}

void BM_StreamSync_Direct(benchmark::State& state) {
  const auto sync = direct<cudaError_t (*)(cudaStream_t)>("cudaStreamSynchronize");
  for (auto _ : state) benchmark::DoNotOptimize(sync(g_stream));
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
  drain();
  const ncclComm_t comm = communicator();
  for (auto _ : state)
    benchmark::DoNotOptimize(ncclAllReduce(g_device, g_device, 16, ncclFloat32, ncclSum, comm, g_stream));
  state.counters["dropped"] = double(drain().dropped());
}

void BM_AllReduce_Direct(benchmark::State& state) {
  using AllReduce = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  const auto all_reduce = reinterpret_cast<AllReduce>(nccl ? dlsym(nccl, "pncclAllReduce") : nullptr);
  const ncclComm_t comm = communicator();
  for (auto _ : state) benchmark::DoNotOptimize(all_reduce(g_device, g_device, 16, ncclFloat32, ncclSum, comm, g_stream));
}

}  // namespace

BENCHMARK(BM_AllReduce_Direct);
BENCHMARK(BM_AllReduce_Hooked);
BENCHMARK(BM_PinnedCopy_Direct);
BENCHMARK(BM_PinnedCopy_Hooked);
BENCHMARK(BM_StreamSync_Direct);
BENCHMARK(BM_StreamSync_Hooked);
BENCHMARK_MAIN();
