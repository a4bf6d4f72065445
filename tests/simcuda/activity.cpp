// The runtime's side of the activity reports (activity.h): the driver's part in the real CUPTI,
// which instruments a launch only while its activity kind is enabled and takes the operation's
// GPU start and end timestamps when it runs, and times the runtime calls themselves.
#include "internal.h"

#include <atomic>

namespace simcuda {
namespace {

std::atomic<const simcudaActivitySink*> g_sink{nullptr};
std::atomic<std::uint32_t> g_next_correlation{1};

std::atomic<std::uint64_t> g_next_thread{1};
thread_local const std::uint64_t tls_thread = g_next_thread++;

thread_local const ApiCall* tls_call = nullptr;  // the outermost runtime call being made

// The GPU clock (gpu_now) in CLOCK_MONOTONIC's ns: steady_clock is CLOCK_MONOTONIC on Linux.
std::uint64_t gpu_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(gpu_now().time_since_epoch()).count());
}

std::uint64_t host_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

std::uint32_t correlation_for_call() { return tls_call ? tls_call->correlation() : g_next_correlation++; }

}  // namespace

ApiCall::ApiCall(std::uint32_t cbid, ApiSync sync) : cbid_(cbid), sync_(sync) {
  if (tls_call) return;
  outermost_ = true;
  correlation_ = g_next_correlation++;
  tls_call = this;
  const simcudaActivitySink* sink = g_sink.load(std::memory_order_acquire);
  reported_ = sink && sink->enabled(SIMCUDA_ACTIVITY_API);
  if (!reported_) return;
  start_ns_ = host_ns();
  simcudaApiCall call{};
  call.cbid = cbid_;
  call.start_ns = start_ns_;
  call.correlation = correlation_;
  call.calling_thread = tls_thread;
  sink->api_entered(&call);
}

ApiCall::~ApiCall() {
  if (!outermost_) return;
  tls_call = nullptr;
  if (!reported_) return;
  const simcudaApiCall call{cbid_,
                            start_ns_,
                            host_ns(),
                            correlation_,
                            static_cast<std::uint32_t>(result_),
                            sync_.kind,
                            static_cast<std::uint32_t>(sync_.device),
                            sync_.stream_id,
                            sync_.event_id,
                            tls_thread};
  // CUPTI may have been finalized during the call: then nobody takes the record.
  if (const simcudaActivitySink* sink = g_sink.load(std::memory_order_acquire)) sink->api_returned(&call);
}

ApiSync stream_sync(cudaStream_t stream, simcudaSyncKind kind, cudaEvent_t event) {
  ApiSync sync{kind};
  if (auto s = resolve_stream(stream)) {
    sync.device = s->device();
    sync.stream_id = s->id();
  }
  if (auto e = event ? resolve_event(event) : nullptr) sync.event_id = e->id;
  return sync;
}

ApiSync event_sync(cudaEvent_t event) {
  ApiSync sync{SIMCUDA_SYNC_EVENT};
  if (auto e = resolve_event(event)) {
    sync.device = e->device;
    sync.event_id = e->id;
  }
  return sync;
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
