#include "gpu_activity.hpp"

#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "environment.hpp"
#include "lazy_global.hpp"
#include "resolve.hpp"
#include "stacks.hpp"
#include "trainshim/clock.hpp"

namespace trainshim::shim {

namespace {

constexpr const char* kCuptiSoname = "libcupti.so.13";
// CUPTI recommends buffers of 1 to 10 MB (Kineto takes 4 MB); a window of a busy job fills a few.
constexpr std::size_t kBufferBytes = std::size_t{2} << 20;
constexpr uint32_t kBuffers = 8;
// With no duty cycle, what CUPTI holds is handed over this often.
constexpr uint64_t kAlwaysOnFlushNs = 1'000'000'000;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

// What trainshim calls in libcupti, found by handle: the program's calls to the same names reach
// the shim's interposed definitions (shim/hooks.cpp), trainshim's own never do.
struct Cupti {
  decltype(&cuptiSubscribe) subscribe;
  decltype(&cuptiUnsubscribe) unsubscribe;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks;
  decltype(&cuptiActivityRegisterTimestampCallback) register_timestamp;
  decltype(&cuptiActivityEnable) enable;
  decltype(&cuptiActivityDisable) disable;
  decltype(&cuptiActivityFlushAll) flush_all;
  decltype(&cuptiActivityGetNextRecord) next_record;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped;
};

struct Timeline {
  std::mutex lock;  // one transition at a time: a window's edge, a yield, the flush at exit
  Cupti cupti{};
  Recorder* recorder = nullptr;
  CUpti_SubscriberHandle subscriber = nullptr;
  // Under `lock`:
  bool holding = false;   // subscribed, CUPTI's buffers come to trainshim
  bool kinds_on = false;  // inside a window
  bool finished = false;  // the process exits: nothing is turned on again
  uint64_t on_ns = 0;
  uint64_t period_ns = 0;  // 0: always on
  // The buffers CUPTI asks for, handed out without a lock (bit i set: buffer i is free).
  uint8_t* buffers[kBuffers] = {};
  std::atomic<uint32_t> free_buffers{(1u << kBuffers) - 1};
  std::mutex names_lock;
  std::unordered_map<const char*, uint32_t> names;  // CUPTI shares one name pointer per kernel
};

LazyGlobal<Timeline> g_timeline;
// The program called CUPTI itself (shim/hooks.cpp): trainshim does not take it.
std::atomic<bool> g_program_client{false};
// Once trainshim stepped aside, the timestamps its callback gives CUPTI are CUPTI's own default
// (CLOCK_REALTIME on Linux, cuptiActivityRegisterTimestampCallback): a callback cannot be removed.
std::atomic<bool> g_program_clock{false};
// A forked child of a process whose CUPTI was loaded.
bool g_inherited = false;

// Set on a thread while it makes trainshim's own CUPTI calls: a libcupti that calls its own entry
// points through the PLT (the real one binds them locally, -Bsymbolic) reaches the shim's hooks,
// which must not take it for the program's client.
thread_local bool t_own_calls __attribute__((tls_model("initial-exec"))) = false;

// trainshim's hold on the timeline, for one transition.
class Transition {
 public:
  explicit Transition(std::mutex& lock) : lock_(lock) { t_own_calls = true; }
  ~Transition() { t_own_calls = false; }
  Transition(const Transition&) = delete;
  Transition& operator=(const Transition&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
};

void set_state(SegmentHeader* header, GpuTimeline state) {
  header->gpu_timeline.store(static_cast<uint32_t>(state), std::memory_order_relaxed);
}

uint64_t CUPTIAPI timestamp() {
  return g_program_clock.load(std::memory_order_relaxed) ? clock_ns(CLOCK_REALTIME) : ticks();
}

// The subscription only claims CUPTI: no callback is enabled.
void CUPTIAPI no_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

// Called on whichever thread needs a buffer (a program's thread too): never waits. With none free,
// CUPTI drops records and counts them (gpu_records_dropped).
void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
  Timeline* t = g_timeline.made();
  if (!t) return;
  uint32_t free = t->free_buffers.load(std::memory_order_acquire);
  while (free != 0) {
    const uint32_t taken = free & -free;
    if (t->free_buffers.compare_exchange_weak(free, free & ~taken, std::memory_order_acq_rel)) {
      *buffer = t->buffers[__builtin_ctz(taken)];
      *size = kBufferBytes;
      return;
    }
  }
}

// The demangled name's String id, published once per kernel.
uint32_t kernel_name(Timeline& t, const char* name) {
  if (!name) return 0;
  std::lock_guard lock(t.names_lock);
  if (auto it = t.names.find(name); it != t.names.end()) return it->second;
  int status = -1;
  char* demangled = name[0] == '_' && name[1] == 'Z' ? abi::__cxa_demangle(name, nullptr, nullptr, &status) : nullptr;
  const uint32_t id = string_id(t.recorder->header(), status == 0 ? demangled : name);
  std::free(demangled);
  if (id) t.names.emplace(name, id);
  return id;
}

Direction direction_of(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return Direction::HostToDevice;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return Direction::DeviceToHost;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return Direction::DeviceToDevice;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return Direction::HostToHost;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return Direction::Peer;
    default:
      return Direction::None;
  }
}

HostMemory memory_of(uint8_t memory_kind) {
  switch (memory_kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE:
      return HostMemory::Pageable;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED:
      return HostMemory::Pinned;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC:
      return HostMemory::Device;
    default:
      return HostMemory::Unknown;  // managed memory, or not known
  }
}

// The host side's memory, as the copy hooks record it (describe.hpp copy_linear).
HostMemory host_side(const CUpti_ActivityMemcpy6& copy, Direction direction) {
  switch (direction) {
    case Direction::HostToDevice:
    case Direction::HostToHost:
      return memory_of(copy.srcKind);
    case Direction::DeviceToHost:
      return memory_of(copy.dstKind);
    case Direction::DeviceToDevice:
    case Direction::Peer:
      return HostMemory::Device;
    case Direction::None:
      break;
  }
  return HostMemory::Unknown;
}

// The fields every activity record has, CUPTI's names for them.
template <class Activity>
void common_fields(EventRecord& e, const Activity& a, Api api) {
  e.begin_ticks = a.start;
  e.end_ticks = a.end;
  e.stream = a.streamId;
  e.object = a.correlationId;
  e.sequence = a.deviceId;
  e.api = static_cast<uint16_t>(api);
}

void write(Timeline& t, const CUpti_Activity& activity) {
  EventRecord e{};
  switch (activity.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(activity);
      common_fields(e, k, Api::gpuKernel);
      e.detail = kernel_name(t, k.name);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& c = reinterpret_cast<const CUpti_ActivityMemcpy6&>(activity);
      const Direction direction = direction_of(c.copyKind);
      common_fields(e, c, Api::gpuMemcpy);
      e.bytes = c.bytes;
      e.direction = static_cast<uint8_t>(direction);
      e.host_memory = static_cast<uint8_t>(host_side(c, direction));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemset4&>(activity);
      common_fields(e, m, Api::gpuMemset);
      e.bytes = m.bytes;
      break;
    }
    default:
      return;
  }
  // A forced flush hands over activities not finished yet, with no end.
  if (e.begin_ticks == 0 || e.end_ticks < e.begin_ticks) return;
  t.recorder->record(thread_state(), [&](EventRecord& r) { r = e; });
}

// On CUPTI's thread, or on the thread that flushes.
void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  Timeline* t = g_timeline.made();
  if (!t || !buffer) return;
  CUpti_Activity* activity = nullptr;
  while (t->cupti.next_record(buffer, valid, &activity) == CUPTI_SUCCESS) write(*t, *activity);
  size_t dropped = 0;
  if (t->cupti.dropped(context, stream, &dropped) == CUPTI_SUCCESS && dropped != 0)
    t->recorder->header()->gpu_records_dropped.fetch_add(dropped, std::memory_order_relaxed);
  for (uint32_t i = 0; i < kBuffers; ++i)
    if (t->buffers[i] == buffer) t->free_buffers.fetch_or(1u << i, std::memory_order_acq_rel);
}

// Turns the window on or off, and records the edge: the report tells the GPU's idle time inside a
// window from the time outside, which was not recorded.
bool set_kinds(Timeline& t, bool on) {
  for (const CUpti_ActivityKind kind : kKinds)
    if ((on ? t.cupti.enable(kind) : t.cupti.disable(kind)) != CUPTI_SUCCESS) return false;
  t.kinds_on = on;
  const uint64_t now = ticks();
  t.recorder->record_about(uint32_t(syscall(SYS_gettid)), [&](EventRecord& r) {
    r = EventRecord{};
    r.begin_ticks = now;
    r.end_ticks = now;
    r.api = static_cast<uint16_t>(on ? Api::gpuTimelineOn : Api::gpuTimelineOff);
  });
  return true;
}

// Ends trainshim's hold on CUPTI, handing what CUPTI still holds to the segment first. Under `lock`.
void let_go(Timeline& t, GpuTimeline why) {
  if (t.kinds_on) set_kinds(t, false);
  t.kinds_on = false;
  t.cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  t.cupti.unsubscribe(t.subscriber);
  t.holding = false;
  set_state(t.recorder->header(), why);
}

// One edge of the duty cycle (or, always on, a hand-over of what CUPTI holds). Under `lock`.
bool step(Timeline& t) {
  if (t.period_ns == 0) return t.cupti.flush_all(0) == CUPTI_SUCCESS;
  if (!t.kinds_on) return set_kinds(t, true);
  return set_kinds(t, false) && t.cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == CUPTI_SUCCESS;
}

void sleep_until(uint64_t deadline_ns) {
  const timespec until{time_t(deadline_ns / 1'000'000'000), long(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) != 0) {
  }
}

// The windows: on from `start` for on_ns, every period_ns, each edge taken by this thread.
void* duty_cycle(void* argument) {
  auto& t = *static_cast<Timeline*>(argument);
  uint64_t window = clock_ns(CLOCK_MONOTONIC);
  bool on = true;
  for (;;) {
    uint64_t next = 0;
    if (t.period_ns == 0) {
      next = window += kAlwaysOnFlushNs;
    } else {
      next = on ? window + t.on_ns : (window += t.period_ns);
      on = !on;
    }
    sleep_until(next);
    Transition transition(t.lock);
    if (!t.holding || t.finished) return nullptr;
    if (!step(t)) {
      let_go(t, GpuTimeline::Failed);
      return nullptr;
    }
  }
}

// The last records of a process: registered after the runtime initialised, this runs before the
// runtime's own exit handlers.
void flush_at_exit() {
  Timeline* t = g_timeline.made();
  if (!t) return;
  Transition transition(t->lock);
  t->finished = true;
  if (!t->holding) return;
  if (t->kinds_on) set_kinds(*t, false);
  t->cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

// The loaded libcupti (Kineto loads it into PyTorch), else TRAINSHIM_CUPTI, else the soname. Bound
// now: a libcupti that needs what the process lacks is refused here, where a lazy binding would end
// the process at its first call.
void* open_cupti() {
  if (void* loaded = dlopen(kCuptiSoname, RTLD_NOW | RTLD_NOLOAD)) return loaded;
  const char* path = std::getenv("TRAINSHIM_CUPTI");
  return dlopen(path && *path ? path : kCuptiSoname, RTLD_NOW | RTLD_LOCAL);
}

bool resolve_cupti(void* handle, Cupti& c) {
  auto get = [handle](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, name));
    return function != nullptr;
  };
  return get(c.subscribe, "cuptiSubscribe") && get(c.unsubscribe, "cuptiUnsubscribe") &&
         get(c.register_callbacks, "cuptiActivityRegisterCallbacks") &&
         get(c.register_timestamp, "cuptiActivityRegisterTimestampCallback") && get(c.enable, "cuptiActivityEnable") &&
         get(c.disable, "cuptiActivityDisable") && get(c.flush_all, "cuptiActivityFlushAll") &&
         get(c.next_record, "cuptiActivityGetNextRecord") && get(c.dropped, "cuptiActivityGetNumDroppedRecords");
}

// CUPTI initialises the driver behind the runtime's back; an error the runtime would report next
// must not appear because of it: one left by trainshim's calls is read (and so cleared) here.
class RuntimeErrorKept {
 public:
  RuntimeErrorKept()
      : peek_(reinterpret_cast<cudaError_t (*)()>(runtime_function(Library::Cudart, "cudaPeekAtLastError"))),
        clear_(reinterpret_cast<cudaError_t (*)()>(runtime_function(Library::Cudart, "cudaGetLastError"))),
        clean_(peek_ && clear_ && peek_() == cudaSuccess) {}
  ~RuntimeErrorKept() {
    if (clean_ && peek_() != cudaSuccess) clear_();
  }
  RuntimeErrorKept(const RuntimeErrorKept&) = delete;
  RuntimeErrorKept& operator=(const RuntimeErrorKept&) = delete;

 private:
  cudaError_t (*peek_)();
  cudaError_t (*clear_)();
  bool clean_;
};

// Subscribes, registers the clock and the buffers, opens the first window. Under `lock`.
GpuTimeline take_cupti(Timeline& t) {
  const CUptiResult subscribed = t.cupti.subscribe(&t.subscriber, no_callback, nullptr);
  if (subscribed == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) return GpuTimeline::Taken;
  if (subscribed != CUPTI_SUCCESS) return GpuTimeline::Failed;
  t.holding = true;
  for (uint8_t*& buffer : t.buffers)
    if (!(buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes))))
      return GpuTimeline::Failed;
  if (t.cupti.register_timestamp(timestamp) != CUPTI_SUCCESS ||
      t.cupti.register_callbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS || !set_kinds(t, true))
    return GpuTimeline::Failed;
  return GpuTimeline::On;
}

void start_thread(Timeline& t) {
  // The job's signals must never be delivered to trainshim's thread.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread;
  const bool started = pthread_create(&thread, nullptr, duty_cycle, &t) == 0;
  if (started) pthread_detach(thread);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  // Without its thread the timeline would stay in its first window: it is given up instead.
  if (!started) let_go(t, GpuTimeline::Failed);
}

}  // namespace

void start_gpu_timeline(Recorder& recorder) {
  SegmentHeader* header = recorder.header();
  if (environment_flag_off("TRAINSHIM_GPU_TIMELINE")) return set_state(header, GpuTimeline::Off);
  if (g_inherited) return set_state(header, GpuTimeline::Unavailable);
  RuntimeErrorKept kept;
  void* handle = open_cupti();
  Cupti cupti{};
  if (!handle || !resolve_cupti(handle, cupti)) return set_state(header, GpuTimeline::Unavailable);
  Timeline& t = g_timeline.get();
  Transition transition(t.lock);
  t.cupti = cupti;
  t.recorder = &recorder;
  // A client seen before now (the hooks set the flag before they look for a timeline to yield).
  if (g_program_client.load()) return set_state(header, GpuTimeline::Taken);
  const uint64_t on_ms = environment_number("TRAINSHIM_GPU_ON_MS", 2000, 1, 86'400'000);
  const uint64_t period_ms = environment_number("TRAINSHIM_GPU_PERIOD_MS", 20000, 0, 86'400'000);
  t.on_ns = on_ms * 1'000'000;
  t.period_ns = on_ms < period_ms ? period_ms * 1'000'000 : 0;
  const GpuTimeline state = take_cupti(t);
  if (state != GpuTimeline::On) {
    if (t.holding) let_go(t, state);
    return set_state(header, state);
  }
  set_state(header, GpuTimeline::On);
  start_thread(t);
  static std::atomic<bool> exit_handler_installed{false};
  if (!exit_handler_installed.exchange(true)) std::atexit(flush_at_exit);
}

void yield_gpu_timeline() {
  if (t_own_calls) return;
  g_program_client.store(true);
  Timeline* t = g_timeline.made();
  if (!t) return;
  Transition transition(t->lock);
  if (!t->holding) return;
  let_go(*t, GpuTimeline::Yielded);
  g_program_clock.store(true, std::memory_order_relaxed);
}

void reset_gpu_timeline_after_fork() {
  g_inherited = g_inherited || g_timeline.made() != nullptr;
  g_timeline.forget();
}

}  // namespace trainshim::shim
