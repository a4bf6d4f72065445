// The runtime's side of the activity reports (activity.h): the driver's part in the real CUPTI,
// which instruments a launch only while its activity kind is enabled and takes the operation's
// GPU start and end timestamps when it runs.
#include "internal.h"

#include <atomic>

namespace simcuda {
namespace {

std::atomic<const simcudaActivitySink*> g_sink{nullptr};
std::atomic<std::uint32_t> g_next_correlation{1};

std::atomic<std::uint64_t> g_next_thread{1};
thread_local const std::uint64_t tls_thread = g_next_thread++;

thread_local bool tls_sharing = false;
thread_local std::uint32_t tls_shared_correlation = 0;

// The GPU clock (gpu_now) in CLOCK_MONOTONIC's ns: steady_clock is CLOCK_MONOTONIC on Linux.
std::uint64_t gpu_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(gpu_now().time_since_epoch()).count());
}

std::uint32_t correlation_for_call() {
  if (!tls_sharing) return g_next_correlation++;
  if (tls_shared_correlation == 0) tls_shared_correlation = g_next_correlation++;
  return tls_shared_correlation;
}

}  // namespace

SharedCorrelation::SharedCorrelation() {
  tls_sharing = true;
  tls_shared_correlation = 0;
}

SharedCorrelation::~SharedCorrelation() {
  tls_sharing = false;
  tls_shared_correlation = 0;
}

simcudaMemoryKind memory_kind(const void* p) {
  auto r = find_range(p);
  if (!r) return SIMCUDA_MEMORY_PAGEABLE;
  return r->kind == MemKind::Device ? SIMCUDA_MEMORY_DEVICE : SIMCUDA_MEMORY_PINNED;
}

std::function<void()> traced(const Stream& s, Traced t, std::function<void()> op) {
  const simcudaActivitySink* sink = g_sink.load(std::memory_order_acquire);
  if (!sink || !sink->enabled(t.activity.kind)) return op;
  t.activity.device = static_cast<std::uint32_t>(s.device());
  t.activity.stream_id = s.id();
  t.activity.correlation = correlation_for_call();
  t.activity.launching_thread = tls_thread;
  return [t = std::move(t), op = std::move(op)]() mutable {
    t.activity.start_ns = gpu_ns();
    op();
    t.activity.end_ns = gpu_ns();
    // CUPTI may have been finalized while the operation was queued: then nobody takes the record.
    if (const simcudaActivitySink* now = g_sink.load(std::memory_order_acquire)) {
      t.activity.name = t.name.empty() ? nullptr : t.name.c_str();
      now->completed(&t.activity);
    }
  };
}

}  // namespace simcuda

extern "C" {

void simcudaSetActivitySink(const simcudaActivitySink* sink) { simcuda::g_sink.store(sink, std::memory_order_release); }

cudaError_t simcudaGetStreamId(cudaStream_t stream, std::uint32_t* id) {
  auto s = simcuda::resolve_stream(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (!id) return cudaErrorInvalidValue;
  *id = s->id();
  return cudaSuccess;
}

}  // extern "C"
