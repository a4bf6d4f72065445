#include "gpu_timing.hpp"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "lazy_global.hpp"
#include "own_calls.hpp"
#include "resolve.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::shim {

namespace {

constexpr std::size_t kMaxEventsPerDevice = 8192;
constexpr int kMaxDevices = 64;
constexpr uint32_t kPendingCapacity = 4096;

struct Runtime {
  cudaError_t (*create)(cudaEvent_t*, unsigned int);
  cudaError_t (*record)(cudaEvent_t, cudaStream_t);
  cudaError_t (*query)(cudaEvent_t);
  cudaError_t (*elapsed)(float*, cudaEvent_t, cudaEvent_t);
  cudaError_t (*clear_error)();
  cudaError_t (*get_device)(int*);
  cudaError_t (*set_device)(int);
  cudaError_t (*stream_device)(cudaStream_t, int*);  // CUDA 12.8 and later; null before
};

const Runtime* runtime() {
  static const Runtime functions = [] {
    auto get = [](const char* name) { return runtime_function(Library::Cudart, name); };
    return Runtime{reinterpret_cast<decltype(Runtime::create)>(get("cudaEventCreateWithFlags")),
                   reinterpret_cast<decltype(Runtime::record)>(get("cudaEventRecord")),
                   reinterpret_cast<decltype(Runtime::query)>(get("cudaEventQuery")),
                   reinterpret_cast<decltype(Runtime::elapsed)>(get("cudaEventElapsedTime")),
                   reinterpret_cast<decltype(Runtime::clear_error)>(get("cudaGetLastError")),
                   reinterpret_cast<decltype(Runtime::get_device)>(get("cudaGetDevice")),
                   reinterpret_cast<decltype(Runtime::set_device)>(get("cudaSetDevice")),
                   reinterpret_cast<decltype(Runtime::stream_device)>(get("cudaStreamGetDevice"))};
  }();
  const bool complete = functions.create && functions.record && functions.query && functions.elapsed &&
                        functions.clear_error && functions.get_device && functions.set_device;
  return complete ? &functions : nullptr;
}

struct Pending {
  cudaEvent_t start;
  cudaEvent_t end;
  EventRecord collective;
};

// An event can be recorded only on a stream of the device it was created on ("event and stream
// must be on the same CUDA context", cudaEventRecord), so each device has its own, as PyTorch's
// CachingHostAllocator keeps one EventPool per device.
struct EventPool {
  std::vector<cudaEvent_t> free;
  std::size_t created = 0;
};

struct PendingSlot {
  std::atomic<uint64_t> state;
  Pending record;
};

// Everything the polling thread shares with the hooks; rebuilt, never locked, in a forked child.
struct Timing {
  std::mutex pool_lock;
  EventPool pools[kMaxDevices];
  std::unordered_map<cudaEvent_t, int> device_of;  // every event created, and its pool
  RingControl control{};
  PendingSlot slots[kPendingCapacity]{};
  BasicRing<PendingSlot> pending{&control, slots, kPendingCapacity};
  std::atomic<bool> poller_started{false};
  Recorder* recorder = nullptr;
  std::mutex poll_lock;          // one poll at a time: the thread's, or the last one at exit
  std::vector<Pending> waiting;  // recorded, not yet complete on the GPU
  bool poller_prepared = false;  // the polling thread's device and capture mode are set
};

LazyGlobal<Timing> g_timing;

Timing& timing() { return g_timing.get(); }

// An event of the device's pool; a new one is created on that device, the thread's current device
// being switched for the creation only. Within the caller's OwnCalls.
cudaEvent_t take_event(Timing& t, const Runtime& rt, OwnCalls& calls, int device) {
  std::lock_guard lock(t.pool_lock);
  EventPool& pool = t.pools[device];
  if (!pool.free.empty()) {
    cudaEvent_t e = pool.free.back();
    pool.free.pop_back();
    return e;
  }
  if (pool.created >= kMaxEventsPerDevice) return nullptr;
  int current = -1;
  if (calls.check(rt.get_device(&current)) != cudaSuccess) return nullptr;
  if (current != device && calls.check(rt.set_device(device)) != cudaSuccess) return nullptr;
  cudaEvent_t e = nullptr;
  const cudaError_t created = calls.check(rt.create(&e, cudaEventDefault));
  if (current != device) calls.check(rt.set_device(current));
  if (created != cudaSuccess) return nullptr;
  ++pool.created;
  t.device_of.emplace(e, device);
  return e;
}

void give_back(Timing& t, std::initializer_list<cudaEvent_t> events) {
  std::lock_guard lock(t.pool_lock);
  for (cudaEvent_t e : events)
    if (e) t.pools[t.device_of.at(e)].free.push_back(e);
}

int device_of(Timing& t, cudaEvent_t e) {
  std::lock_guard lock(t.pool_lock);
  return t.device_of.at(e);
}

// The device whose pool serves a collective on this stream: the stream's own, or, where the
// runtime cannot say (before CUDA 12.8) and for the legacy and per-thread streams, the current one.
bool stream_device(const Runtime& rt, OwnCalls& calls, cudaStream_t stream, int& device) {
  const bool special = stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
  if (!special && rt.stream_device) return calls.check(rt.stream_device(stream, &device)) == cudaSuccess;
  return calls.check(rt.get_device(&device)) == cudaSuccess;
}

// The polling thread is trainshim's own. Its first runtime call selects the device of the events
// it polls, so that it creates no context on device 0 of a process that works on another device
// (pytorch#126381); it then leaves global capture mode, once, so that its event queries never
// invalidate a capture of the program (the watchdog fix of pytorch#148594).
void prepare_poller(Timing& t, const Runtime& rt, int device) {
  if (t.poller_prepared) return;
  t.poller_prepared = true;
  if (rt.set_device(device) != cudaSuccess) rt.clear_error();
  relax_this_thread();
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
    {
      std::lock_guard lock(t.poll_lock);
      Pending p;
      while (t.pending.pop(p) == BasicRing<PendingSlot>::PopStatus::Record) t.waiting.push_back(p);
      if (!t.waiting.empty()) prepare_poller(t, *runtime(), device_of(t, t.waiting.front().start));
    }
    if (t.poller_prepared) poll_once(t);
    timespec pause{0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
  return nullptr;
}

// The last collectives of a process finish just before it exits, between two polls. Registered
// after the runtime initialised, this runs before the runtime's own exit handlers, on the
// program's thread.
void flush_at_exit() {
  Timing* t = g_timing.made();
  if (!t || !t->recorder || !runtime()) return;
  OwnCalls calls;
  if (calls.allowed()) poll_once(*t);
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
  OwnCalls calls;
  if (!calls.allowed()) {
    header->untimed_no_event.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  if (calls.capturing(s)) {
    header->untimed_capturing.fetch_add(1, std::memory_order_relaxed);
    return {.untimed = kUntimedCapturing};
  }
  Timing& t = timing();
  int device = -1;
  cudaEvent_t start = nullptr, end = nullptr;
  if (stream_device(*rt, calls, s, device) && device >= 0 && device < kMaxDevices) {
    start = take_event(t, *rt, calls, device);
    end = start ? take_event(t, *rt, calls, device) : nullptr;
  }
  if (!end || calls.check(rt->record(start, s)) != cudaSuccess) {
    give_back(t, {start, end});
    header->untimed_no_event.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  return {start, end, 0};
}

void timing_end(Recorder& recorder, TimingToken token, void* stream, const EventRecord& collective) {
  if (!token.start) return;
  const Runtime& rt = *runtime();
  Timing& t = timing();
  const auto start = static_cast<cudaEvent_t>(token.start), end = static_cast<cudaEvent_t>(token.end);
  OwnCalls calls;
  // An end event recorded into a capture begun meanwhile could never be queried by the poller.
  if (!calls.allowed() || calls.capturing(static_cast<cudaStream_t>(stream)) ||
      calls.check(rt.record(end, static_cast<cudaStream_t>(stream))) != cudaSuccess ||
      !t.pending.push({start, end, collective})) {
    give_back(t, {start, end});
    recorder.header()->untimed_no_event.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  start_poller(t, recorder);
}

void timing_cancel(TimingToken token) {
  if (token.start) give_back(timing(), {static_cast<cudaEvent_t>(token.start), static_cast<cudaEvent_t>(token.end)});
}

void reset_timing_after_fork() {
  // The polling thread and the events belong to the parent.
  g_timing.forget();
}

}  // namespace trainshim::shim
