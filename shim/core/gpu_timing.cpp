#include "gpu_timing.hpp"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <vector>

#include "resolve.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::shim {

namespace {

constexpr std::size_t kMaxEvents = 8192;
constexpr uint32_t kPendingCapacity = 4096;

struct Runtime {
  cudaError_t (*create)(cudaEvent_t*, unsigned int);
  cudaError_t (*record)(cudaEvent_t, cudaStream_t);
  cudaError_t (*query)(cudaEvent_t);
  cudaError_t (*elapsed)(float*, cudaEvent_t, cudaEvent_t);
  cudaError_t (*capturing)(cudaStream_t, cudaStreamCaptureStatus*);
  cudaError_t (*clear_error)();
};

const Runtime* runtime() {
  static const Runtime functions = [] {
    auto get = [](const char* name) { return runtime_function(Library::Cudart, name); };
    return Runtime{reinterpret_cast<decltype(Runtime::create)>(get("cudaEventCreateWithFlags")),
                   reinterpret_cast<decltype(Runtime::record)>(get("cudaEventRecord")),
                   reinterpret_cast<decltype(Runtime::query)>(get("cudaEventQuery")),
                   reinterpret_cast<decltype(Runtime::elapsed)>(get("cudaEventElapsedTime")),
                   reinterpret_cast<decltype(Runtime::capturing)>(get("cudaStreamIsCapturing")),
                   reinterpret_cast<decltype(Runtime::clear_error)>(get("cudaGetLastError"))};
  }();
  const bool complete = functions.create && functions.record && functions.query && functions.elapsed &&
                        functions.capturing && functions.clear_error;
  return complete ? &functions : nullptr;
}

struct Pending {
  cudaEvent_t start;
  cudaEvent_t end;
  EventRecord collective;
};

struct PendingSlot {
  std::atomic<uint64_t> state;
  Pending record;
};

// Everything the polling thread shares with the hooks; rebuilt, never locked, in a forked child.
struct Timing {
  std::mutex pool_lock;
  std::vector<cudaEvent_t> pool;
  std::size_t created = 0;
  RingControl control{};
  PendingSlot slots[kPendingCapacity]{};
  BasicRing<PendingSlot> pending{&control, slots, kPendingCapacity};
  std::atomic<bool> poller_started{false};
  Recorder* recorder = nullptr;
  std::mutex poll_lock;           // one poll at a time: the thread's, or the last one at exit
  std::vector<Pending> waiting;   // recorded, not yet complete on the GPU
};

std::atomic<Timing*> g_timing{nullptr};

Timing& timing() {
  Timing* current = g_timing.load(std::memory_order_acquire);
  if (current) return *current;
  auto* fresh = new Timing;
  if (g_timing.compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *current;
}

cudaEvent_t take_event(Timing& t, const Runtime& rt) {
  std::lock_guard lock(t.pool_lock);
  if (!t.pool.empty()) {
    cudaEvent_t e = t.pool.back();
    t.pool.pop_back();
    return e;
  }
  if (t.created >= kMaxEvents) return nullptr;
  cudaEvent_t e = nullptr;
  if (rt.create(&e, cudaEventDefault) != cudaSuccess) {
    rt.clear_error();
    return nullptr;
  }
  ++t.created;
  return e;
}

void give_back(Timing& t, std::initializer_list<cudaEvent_t> events) {
  std::lock_guard lock(t.pool_lock);
  for (cudaEvent_t e : events)
    if (e) t.pool.push_back(e);
}

// Writes a timing record for every collective the GPU has finished; keeps the others.
void poll_once(Timing& t) {
  const Runtime& rt = *runtime();
  std::lock_guard lock(t.poll_lock);
  Pending p;
  while (t.pending.pop(p) == BasicRing<PendingSlot>::PopStatus::Record) t.waiting.push_back(p);
  for (std::size_t i = 0; i < t.waiting.size();) {
    Pending& w = t.waiting[i];
    const cudaError_t state = rt.query(w.end);
    if (state == cudaErrorNotReady) {
      ++i;
      continue;
    }
    float ms = 0;
    if (state == cudaSuccess && rt.elapsed(&ms, w.start, w.end) == cudaSuccess) {
      const EventRecord& c = w.collective;
      t.recorder->record(thread_state(), [&](EventRecord& r) {
        r = c;
        r.api = static_cast<uint16_t>(Api::ncclGpuTiming);
        r.detail = uint64_t(double(ms) * 1e6);
        r.native_stack = 0;
        r.python_stack = 0;
      });
    } else {
      rt.clear_error();
    }
    give_back(t, {w.start, w.end});
    w = t.waiting.back();
    t.waiting.pop_back();
  }
}

void* poll(void* arg) {
  auto& t = *static_cast<Timing*>(arg);
  for (;;) {
    poll_once(t);
    timespec pause{0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
  return nullptr;
}

// The last collectives of a process finish just before it exits, between two polls. Registered
// after the runtime initialised, this runs before the runtime's own exit handlers.
void flush_at_exit() {
  Timing* t = g_timing.load(std::memory_order_acquire);
  if (t && t->recorder && runtime()) poll_once(*t);
}

void start_poller(Timing& t, Recorder& recorder) {
  if (t.poller_started.exchange(true)) return;
  t.recorder = &recorder;
  // The job's signals must never be delivered to trainshim's thread.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread;
  if (pthread_create(&thread, nullptr, poll, &t) == 0) pthread_detach(thread);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  static std::atomic<bool> exit_handler_installed{false};
  if (!exit_handler_installed.exchange(true)) std::atexit(flush_at_exit);
}

}  // namespace

TimingToken timing_begin(SegmentHeader* header, void* stream) {
  const Runtime* rt = runtime();
  if (!rt) return {};
  auto* s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (rt->capturing(s, &capture) != cudaSuccess) {
    rt->clear_error();
    return {};
  }
  if (capture != cudaStreamCaptureStatusNone) {
    header->untimed_capturing.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  Timing& t = timing();
  cudaEvent_t start = take_event(t, *rt);
  cudaEvent_t end = start ? take_event(t, *rt) : nullptr;
  if (!end || rt->record(start, s) != cudaSuccess) {
    give_back(t, {start, end});
    header->untimed_no_event.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  return {start, end};
}

void timing_end(Recorder& recorder, TimingToken token, void* stream, const EventRecord& collective) {
  if (!token.start) return;
  const Runtime& rt = *runtime();
  Timing& t = timing();
  if (rt.record(static_cast<cudaEvent_t>(token.end), static_cast<cudaStream_t>(stream)) != cudaSuccess ||
      !t.pending.push({static_cast<cudaEvent_t>(token.start), static_cast<cudaEvent_t>(token.end), collective})) {
    rt.clear_error();
    give_back(t, {static_cast<cudaEvent_t>(token.start), static_cast<cudaEvent_t>(token.end)});
    recorder.header()->untimed_no_event.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  start_poller(t, recorder);
}

void reset_timing_after_fork() {
  // The polling thread and the events belong to the parent.
  g_timing.store(nullptr, std::memory_order_release);
}

}  // namespace trainshim::shim
