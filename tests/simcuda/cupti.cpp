// The simulated CUPTI (libcupti.so.13): the Activity API as a client uses it, compiled against the
// toolkit's cupti headers so that every signature and record layout is the real one; every symbol
// has the version libcupti.so.13 (cupti.map). The records come from what the simulated streams ran:
// the runtime reports each kernel, copy and memset through the sink of activity.h once it ran.
//
// What the real CUPTI does, and where the simulation follows it (cupti_activity.h,
// cupti_callbacks.h):
// - one subscriber at a time: cuptiSubscribe fails with CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
//   while another client, or a tool such as Nsight Systems, holds CUPTI (SIMCUDA_CUPTI_HELD=1 stands
//   for that tool);
// - cuptiActivityEnable: all kinds start disabled; a record is made for an operation launched
//   while its kind is enabled;
// - buffers come from the client's bufferRequested callback, are filled with 8-byte aligned
//   records, and return through bufferCompleted on CUPTI's worker thread once full, or at
//   cuptiActivityFlushAll; a record for which the client gave no buffer is dropped and counted
//   (cuptiActivityGetNumDroppedRecords);
// - as in CUPTI 13 by default (CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER = 1), each host thread
//   that launches work has a buffer of its own, so several buffers may be filling at once;
// - timestamps: with cuptiActivityRegisterTimestampCallback, the GPU's timestamps are put on the
//   callback's clock by linear interpolation when the records are made; without it, CUPTI's own
//   clock. The real one is CLOCK_REALTIME; here it is CLOCK_MONOTONIC plus a large constant, so
//   a client that reads timestamps without converting them gets nonsense it can detect.
// - RUNTIME: a record per runtime call that launches, copies, sets, waits, records, allocates or
//   frees (the calls of simcuda's ApiCall), with the correlation id its kernels, copies and
//   memsets carry; every cbid while the kind is enabled, or the ones cuptiActivityEnableRuntimeApi
//   names, less those it turned off (it is overridden by a later cuptiActivityEnable(RUNTIME));
// - EXTERNAL_CORRELATION: with each such call, a record per kind of external id the calling
//   thread has pushed (cuptiActivityPushExternalCorrelationId), its innermost id: this is how
//   torch.profiler (Kineto) ties a kernel to the aten op that launched it;
// - SYNCHRONIZATION: a record per successful cudaStreamSynchronize, cudaEventSynchronize,
//   cudaDeviceSynchronize (a context synchronisation) and cudaStreamWaitEvent.
// DRIVER and OVERHEAD records are not made: those kinds answer NOT_COMPATIBLE.
// The callback API (cuptiEnableCallback, cuptiEnableDomain) is accepted but never calls back.
#include "activity.h"

#include <cupti.h>

#include <time.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <pthread.h>
#include <unistd.h>

namespace {

constexpr std::uint64_t kPrivateClockOffset = 1'000'000'000'000'000'000ull;  // about 31.7 years, in ns

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

struct Buffer {
  std::uint8_t* data = nullptr;
  std::size_t size = 0;
  std::size_t valid = 0;  // end of the last record
  std::size_t records = 0;
  std::size_t max_records = 0;  // 0: as many as fit
};

// The position of the first 8-byte aligned address at or after data + offset.
std::size_t aligned(const std::uint8_t* data, std::size_t offset) {
  const auto at = reinterpret_cast<std::uintptr_t>(data) + offset;
  return offset + ((8 - at % 8) % 8);
}

std::size_t record_size(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
      return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return sizeof(CUpti_ActivitySynchronization2);
    default:
      return 0;
  }
}

struct Subscriber {
  CUpti_CallbackFunc callback;
  void* userdata;
};

struct State {
  std::mutex mu;
  std::optional<Subscriber> subscriber;
  std::string subscriber_name;
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  bool per_thread_buffers = true;
  std::map<std::uint64_t, Buffer> filling;  // by launching thread; only key 0 without per-thread buffers
  std::deque<Buffer> full;                  // waiting for the worker
  std::uint64_t handed_over = 0, delivered = 0;
  bool worker_started = false;
  std::condition_variable work_cv, delivered_cv;
  std::size_t dropped = 0;
  CUpti_TimestampCallbackFunc timestamp = nullptr;
  std::uint64_t anchor_raw = 0, anchor_client = 0;  // a (CLOCK_MONOTONIC, callback) pair
  std::unordered_set<std::string> names;            // kernel names; records point into them
  std::int64_t next_grid_id = 1;
  std::set<CUpti_CallbackId> runtime_on, runtime_off;  // cuptiActivityEnableRuntimeApi's choices
};

// Leaked on purpose: stream workers may report records during static destruction at exit.
State& state() {
  static State* s = new State;
  return *s;
}

std::atomic<bool> g_kernel{false}, g_concurrent_kernel{false}, g_memcpy{false}, g_memset{false};
std::atomic<bool> g_runtime{false}, g_external_correlation{false}, g_synchronization{false};
std::atomic<bool> g_some_runtime_api{false};  // cuptiActivityEnableRuntimeApi turned a cbid on

// The external ids each thread has pushed, by kind; the last is the innermost.
thread_local std::vector<std::uint64_t> tls_external_ids[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];

std::uint64_t private_clock() { return monotonic_ns() + kPrivateClockOffset; }

// ---- the buffers ----

// The caller holds the lock. Asks the client for a buffer, as CUPTI does when it has a record
// and no buffer; null when the client gives none.
Buffer* request_buffer(State& s, std::uint64_t key) {
  if (!s.requested) return nullptr;
  Buffer b;
  s.requested(&b.data, &b.size, &b.max_records);
  if (!b.data || !b.size) return nullptr;
  return &(s.filling[key] = b);
}

// The caller holds the lock.
void hand_over(State& s, std::map<std::uint64_t, Buffer>::iterator filling) {
  s.full.push_back(filling->second);
  s.filling.erase(filling);
  ++s.handed_over;
  s.work_cv.notify_one();
}

bool fits(const Buffer& b, std::size_t size) {
  return !(b.max_records && b.records >= b.max_records) && aligned(b.data, b.valid) + size <= b.size;
}

void append(const void* record, std::size_t size, std::uint64_t launching_thread) {
  State& s = state();
  std::lock_guard lock(s.mu);
  const std::uint64_t key = s.per_thread_buffers ? launching_thread : 0;
  auto it = s.filling.find(key);
  Buffer* b = it == s.filling.end() ? request_buffer(s, key) : &it->second;
  if (b && !fits(*b, size)) {
    hand_over(s, s.filling.find(key));
    b = request_buffer(s, key);
  }
  if (!b || !fits(*b, size)) {
    ++s.dropped;
    return;
  }
  const std::size_t at = aligned(b->data, b->valid);
  std::memcpy(b->data + at, record, size);
  b->valid = at + size;
  ++b->records;
}

// CUPTI's worker thread: returns full buffers to the client, outside the lock.
void deliver_forever() {
  State& s = state();
  std::unique_lock lock(s.mu);
  for (;;) {
    s.work_cv.wait(lock, [&] { return !s.full.empty(); });
    Buffer b = s.full.front();
    s.full.pop_front();
    CUpti_BuffersCallbackCompleteFunc completed = s.completed;
    lock.unlock();
    if (completed) completed(nullptr, 0, b.data, b.size, b.valid);
    lock.lock();
    ++s.delivered;
    s.delivered_cv.notify_all();
  }
}

// Hands over the buffers being filled (also empty ones, with `empty_too`) and waits until the
// worker has returned every buffer handed over so far.
void flush(bool empty_too) {
  State& s = state();
  std::unique_lock lock(s.mu);
  for (auto it = s.filling.begin(); it != s.filling.end();) {
    auto next = std::next(it);
    if (it->second.records || empty_too) hand_over(s, it);
    it = next;
  }
  const std::uint64_t target = s.handed_over;
  s.delivered_cv.wait(lock, [&] { return s.delivered >= target; });
}

// ---- the records ----

// GPU timestamps on the client's clock: CUPTI interpolates linearly between the GPU's clock
// (here CLOCK_MONOTONIC) and the callback's, whose unit may be other than ns (a TSC).
struct ClockPair {
  std::uint64_t raw, client;
};

// One (CLOCK_MONOTONIC, client) pair, the client's read bracketed by two monotonic reads; the
// tightest of a few tries wins. A thread preempted between the two reads would skew the
// interpolation's rate by the preemption over the interval since the anchor (a busy machine).
ClockPair sample_clocks(CUpti_TimestampCallbackFunc client_clock) {
  constexpr int kTries = 8;
  constexpr std::uint64_t kTightNs = 500;
  ClockPair best{};
  std::uint64_t best_gap = UINT64_MAX;
  for (int i = 0; i < kTries && best_gap > kTightNs; ++i) {
    const std::uint64_t before = monotonic_ns();
    const std::uint64_t client = client_clock();
    const std::uint64_t after = monotonic_ns();
    if (after - before < best_gap) {
      best_gap = after - before;
      best = {before + (after - before) / 2, client};
    }
  }
  return best;
}

struct ClockMap {
  std::uint64_t now_raw, now_client;
  long double rate;
  std::uint64_t operator()(std::uint64_t raw) const {
    return now_client - static_cast<std::uint64_t>(static_cast<long double>(now_raw - raw) * rate);
  }
};

std::optional<ClockMap> clock_map() {
  State& s = state();
  CUpti_TimestampCallbackFunc timestamp;
  std::uint64_t anchor_raw, anchor_client;
  {
    std::lock_guard lock(s.mu);
    timestamp = s.timestamp;
    anchor_raw = s.anchor_raw;
    anchor_client = s.anchor_client;
  }
  if (!timestamp) return std::nullopt;
  const ClockPair now = sample_clocks(timestamp);
  ClockMap m{now.raw, now.client, 1.0L};
  if (m.now_raw > anchor_raw && m.now_client > anchor_client)
    m.rate = static_cast<long double>(m.now_client - anchor_client) / static_cast<long double>(m.now_raw - anchor_raw);
  return m;
}

std::uint8_t cupti_memory_kind(simcudaMemoryKind kind) {
  switch (kind) {
    case SIMCUDA_MEMORY_PAGEABLE:
      return CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
    case SIMCUDA_MEMORY_PINNED:
      return CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    case SIMCUDA_MEMORY_DEVICE:
      return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  }
  return CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN;
}

// The direction follows where the bytes are, whatever cudaMemcpyKind the call named.
std::uint8_t copy_kind(simcudaMemoryKind src, simcudaMemoryKind dst) {
  const bool from_device = src == SIMCUDA_MEMORY_DEVICE, to_device = dst == SIMCUDA_MEMORY_DEVICE;
  if (from_device) return to_device ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOD : CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  return to_device ? CUPTI_ACTIVITY_MEMCPY_KIND_HTOD : CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
}

const char* kernel_name(const char* name) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.names.emplace(name ? name : "").first->c_str();
}

std::int64_t next_grid_id() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.next_grid_id++;
}

bool sink_enabled(simcudaActivityKind kind) {
  switch (kind) {
    case SIMCUDA_ACTIVITY_KERNEL:
      return g_kernel || g_concurrent_kernel;
    case SIMCUDA_ACTIVITY_MEMCPY:
      return g_memcpy;
    case SIMCUDA_ACTIVITY_MEMSET:
      return g_memset;
    case SIMCUDA_ACTIVITY_API:
      return g_runtime || g_external_correlation || g_synchronization || g_some_runtime_api;
  }
  return false;
}

bool runtime_record_wanted(CUpti_CallbackId cbid) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.runtime_on.count(cbid)) return true;
  return g_runtime && !s.runtime_off.count(cbid);
}

void sink_completed(const simcudaActivity* a) {
  const std::optional<ClockMap> map = clock_map();
  const std::uint64_t start = map ? (*map)(a->start_ns) : a->start_ns + kPrivateClockOffset;
  const std::uint64_t end = map ? (*map)(a->end_ns) : a->end_ns + kPrivateClockOffset;
  const std::uint32_t context = a->device + 1;  // one primary context per device; CUPTI's ids start at 1
  // The fields every record of the three kinds has, under the same names.
  auto when_and_where = [&](auto& r) {
    r.start = start;
    r.end = end;
    r.deviceId = a->device;
    r.contextId = context;
    r.streamId = a->stream_id;
    r.correlationId = a->correlation;
  };
  switch (a->kind) {
    case SIMCUDA_ACTIVITY_KERNEL: {
      CUpti_ActivityKernel10 r{};
      r.kind = g_concurrent_kernel ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL : CUPTI_ACTIVITY_KIND_KERNEL;
      when_and_where(r);
      r.completed = end;
      r.gridX = static_cast<std::int32_t>(a->grid.x);
      r.gridY = static_cast<std::int32_t>(a->grid.y);
      r.gridZ = static_cast<std::int32_t>(a->grid.z);
      r.blockX = static_cast<std::int32_t>(a->block.x);
      r.blockY = static_cast<std::int32_t>(a->block.y);
      r.blockZ = static_cast<std::int32_t>(a->block.z);
      r.dynamicSharedMemory = static_cast<std::int32_t>(a->dynamic_shared_bytes);
      r.gridId = next_grid_id();
      r.name = kernel_name(a->name);
      r.launchType =
          a->cooperative ? CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE : CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
      r.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
      append(&r, sizeof(r), a->launching_thread);
      return;
    }
    case SIMCUDA_ACTIVITY_MEMCPY: {
      CUpti_ActivityMemcpy6 r{};
      r.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
      r.copyKind = copy_kind(a->src, a->dst);
      r.srcKind = cupti_memory_kind(a->src);
      r.dstKind = cupti_memory_kind(a->dst);
      r.flags = a->async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : CUPTI_ACTIVITY_FLAG_NONE;
      r.bytes = a->bytes;
      when_and_where(r);
      r.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
      r.copyCount = a->copy_count;
      append(&r, sizeof(r), a->launching_thread);
      return;
    }
    case SIMCUDA_ACTIVITY_MEMSET: {
      CUpti_ActivityMemset4 r{};
      r.kind = CUPTI_ACTIVITY_KIND_MEMSET;
      r.value = a->value;
      r.bytes = a->bytes;
      when_and_where(r);
      r.flags = a->async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : CUPTI_ACTIVITY_FLAG_NONE;
      r.memoryKind = cupti_memory_kind(a->dst);
      r.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
      append(&r, sizeof(r), a->launching_thread);
      return;
    }
    case SIMCUDA_ACTIVITY_API:  // reported through api_returned
      return;
  }
}

// A runtime call's external ids, on the calling thread at the call's start: before the records of
// what it launches, as in CUPTI (a client that links records in their order needs them first).
void sink_api_entered(const simcudaApiCall* c) {
  if (g_external_correlation) {
    for (int kind = 0; kind < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; ++kind) {
      if (tls_external_ids[kind].empty()) continue;
      CUpti_ActivityExternalCorrelation r{};
      r.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
      r.externalKind = static_cast<CUpti_ExternalCorrelationKind>(kind);
      r.externalId = tls_external_ids[kind].back();
      r.correlationId = c->correlation;
      append(&r, sizeof(r), c->calling_thread);
    }
  }
}

// The records of one runtime call, on the calling thread as it returns: the call, the
// synchronisation it made.
void sink_api_returned(const simcudaApiCall* c) {
  const std::optional<ClockMap> map = clock_map();
  const std::uint64_t start = map ? (*map)(c->start_ns) : c->start_ns + kPrivateClockOffset;
  const std::uint64_t end = map ? (*map)(c->end_ns) : c->end_ns + kPrivateClockOffset;
  if (runtime_record_wanted(c->cbid)) {
    CUpti_ActivityAPI r{};
    r.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    r.cbid = c->cbid;
    r.start = start;
    r.end = end;
    r.processId = static_cast<std::uint32_t>(getpid());
    // The low 32 bits of the pthread id, as the real CUPTI records it (Kineto keys threads by them).
    const pthread_t self = pthread_self();
    std::memcpy(&r.threadId, &self, sizeof(r.threadId));
    r.correlationId = c->correlation;
    r.returnValue = c->result;
    append(&r, sizeof(r), c->calling_thread);
  }
  // Only successful synchronisations by default (cuptiActivityEnableAllSyncRecords would add the rest).
  if (g_synchronization && c->sync != SIMCUDA_SYNC_NONE && c->result == 0) {
    CUpti_ActivitySynchronization2 r{};
    r.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    r.type = static_cast<CUpti_ActivitySynchronizationType>(c->sync);
    r.start = start;
    r.end = end;
    r.correlationId = c->correlation;
    r.contextId = c->device + 1;
    r.streamId = c->stream_id;
    r.cudaEventId = c->event_id;
    r.cudaEventSyncId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
    r.returnValue = c->result;
    append(&r, sizeof(r), c->calling_thread);
  }
}

const simcudaActivitySink kSink{&sink_enabled, &sink_completed, &sink_api_entered, &sink_api_returned};

std::atomic<bool>* enable_flag(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
      return &g_kernel;
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return &g_concurrent_kernel;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return &g_memcpy;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return &g_memset;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      return &g_runtime;
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
      return &g_external_correlation;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return &g_synchronization;
    default:
      return nullptr;
  }
}

bool valid_kind(CUpti_ActivityKind kind) {
  return kind > CUPTI_ACTIVITY_KIND_INVALID && kind < CUPTI_ACTIVITY_KIND_COUNT;
}

// Another tool holds CUPTI when the program starts under it (Nsight Systems injects itself through
// CUDA_INJECTION64_PATH).
bool held_by_tool() {
  const char* held = std::getenv("SIMCUDA_CUPTI_HELD");
  return held && std::strcmp(held, "1") == 0;
}

CUpti_SubscriberHandle handle_of(Subscriber& s) { return reinterpret_cast<CUpti_SubscriberHandle>(&s); }

}  // namespace

extern "C" {

CUptiResult cuptiGetVersion(uint32_t* version) {
  if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

#define SIMCUPTI_RESULTS(X)                         \
  X(CUPTI_SUCCESS)                                  \
  X(CUPTI_ERROR_INVALID_PARAMETER)                  \
  X(CUPTI_ERROR_INVALID_DEVICE)                     \
  X(CUPTI_ERROR_INVALID_CONTEXT)                    \
  X(CUPTI_ERROR_INVALID_OPERATION)                  \
  X(CUPTI_ERROR_OUT_OF_MEMORY)                      \
  X(CUPTI_ERROR_API_NOT_IMPLEMENTED)                \
  X(CUPTI_ERROR_MAX_LIMIT_REACHED)                  \
  X(CUPTI_ERROR_NOT_READY)                          \
  X(CUPTI_ERROR_NOT_COMPATIBLE)                     \
  X(CUPTI_ERROR_NOT_INITIALIZED)                    \
  X(CUPTI_ERROR_QUEUE_EMPTY)                        \
  X(CUPTI_ERROR_INVALID_HANDLE)                     \
  X(CUPTI_ERROR_INVALID_STREAM)                     \
  X(CUPTI_ERROR_INVALID_KIND)                       \
  X(CUPTI_ERROR_DISABLED)                           \
  X(CUPTI_ERROR_NOT_SUPPORTED)                      \
  X(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)            \
  X(CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED)      \
  X(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) \
  X(CUPTI_ERROR_UNKNOWN)

// The real strings are the enumerators' names.
CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
#define SIMCUPTI_STRING(code) \
  case code:                  \
    *str = #code;             \
    return CUPTI_SUCCESS;
    SIMCUPTI_RESULTS(SIMCUPTI_STRING)
#undef SIMCUPTI_STRING
    default:
      return CUPTI_ERROR_INVALID_PARAMETER;
  }
}

CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata,
                              CUpti_SubscriberParams* pParams) {
  if (!subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
  if (pParams && pParams->structSize == 0) return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = state();
  std::lock_guard lock(s.mu);
  const bool held = held_by_tool();
  if (held || s.subscriber) {
    // "the name of the incompatible tool or the existing CUPTI subscriber"
    if (pParams && pParams->oldSubscriberName && pParams->oldSubscriberSize) {
      const std::string old = held ? "Nsight Systems" : "CUPTI for " + s.subscriber_name;
      const std::size_t n = std::min(old.size(), pParams->oldSubscriberSize - 1);
      std::memcpy(pParams->oldSubscriberName, old.data(), n);
      pParams->oldSubscriberName[n] = '\0';
    }
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  s.subscriber = Subscriber{callback, userdata};
  s.subscriber_name = pParams && pParams->subscriberName ? std::string(pParams->subscriberName).substr(0, 53) : "";
  *subscriber = handle_of(*s.subscriber);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  return cuptiSubscribe_v2(subscriber, callback, userdata, nullptr);
}

CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!subscriber || !s.subscriber || subscriber != handle_of(*s.subscriber)) return CUPTI_ERROR_INVALID_PARAMETER;
  s.subscriber.reset();
  s.subscriber_name.clear();
  return CUPTI_SUCCESS;
}

namespace {
CUptiResult check_subscriber(CUpti_SubscriberHandle subscriber) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return subscriber && s.subscriber && subscriber == handle_of(*s.subscriber) ? CUPTI_SUCCESS
                                                                              : CUPTI_ERROR_INVALID_PARAMETER;
}
}  // namespace

CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain) {
  (void)enable;
  if (domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE) return CUPTI_ERROR_INVALID_PARAMETER;
  return check_subscriber(subscriber);
}

CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain,
                                CUpti_CallbackId cbid) {
  (void)enable, (void)cbid;
  if (domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE) return CUPTI_ERROR_INVALID_PARAMETER;
  return check_subscriber(subscriber);
}

// Kinds the simulation does not make records for cannot be enabled: CUPTI_ERROR_NOT_COMPATIBLE
// ("if the activity kind cannot be enabled").
CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (!valid_kind(kind)) return CUPTI_ERROR_INVALID_KIND;
  std::atomic<bool>* flag = enable_flag(kind);
  if (!flag) return CUPTI_ERROR_NOT_COMPATIBLE;
  if (kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
    State& s = state();
    std::lock_guard lock(s.mu);
    s.runtime_on.clear();
    s.runtime_off.clear();
    g_some_runtime_api = false;
  }
  flag->store(true);
  simcudaSetActivitySink(&kSink);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (!valid_kind(kind)) return CUPTI_ERROR_INVALID_KIND;
  if (std::atomic<bool>* flag = enable_flag(kind)) flag->store(false);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (enable) {
    s.runtime_on.insert(cbid);
    s.runtime_off.erase(cbid);
  } else {
    s.runtime_off.insert(cbid);
    s.runtime_on.erase(cbid);
  }
  g_some_runtime_api = !s.runtime_on.empty();
  if (g_some_runtime_api) simcudaSetActivitySink(&kSink);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
    return CUPTI_ERROR_INVALID_PARAMETER;
  tls_external_ids[kind].push_back(id);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t* lastId) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
    return CUPTI_ERROR_INVALID_PARAMETER;
  std::vector<std::uint64_t>& ids = tls_external_ids[kind];
  if (ids.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (lastId) *lastId = ids.back();
  ids.pop_back();
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                                           CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
  if (!funcBufferRequested || !funcBufferCompleted) return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = state();
  std::lock_guard lock(s.mu);
  s.requested = funcBufferRequested;
  s.completed = funcBufferCompleted;
  if (!s.worker_started) {
    // Detached: it lives as long as the process, like CUPTI's worker.
    std::thread(deliver_forever).detach();
    s.worker_started = true;
  }
  return CUPTI_SUCCESS;
}

// Default and forced flushes are the same here: a record is written only once its operation ran,
// so every buffer holds completed records only.
CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  {
    State& s = state();
    std::lock_guard lock(s.mu);
    if (!s.requested) return CUPTI_ERROR_INVALID_OPERATION;
  }
  flush(false);
  return CUPTI_SUCCESS;
}

// Periodic flushes return only full buffers, which the simulation returns at once anyway.
CUptiResult cuptiActivityFlushPeriod(uint32_t time) {
  (void)time;
  return CUPTI_SUCCESS;
}

// Only CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER changes anything here; the others tune the
// device's buffers and memory, which the simulation has none of, and are accepted as they are.
CUptiResult cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t* valueSize, void* value) {
  if (!valueSize || !value || attr < CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE ||
      attr > CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_DEVICE_GRAPHS)
    return CUPTI_ERROR_INVALID_PARAMETER;
  if (attr != CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER) return CUPTI_SUCCESS;
  if (*valueSize < sizeof(std::uint8_t)) return CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
  State& s = state();
  std::lock_guard lock(s.mu);
  s.per_thread_buffers = *static_cast<std::uint8_t*>(value) != 0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetAttribute(CUpti_ActivityAttribute attr, size_t* valueSize, void* value) {
  if (!valueSize || !value || attr != CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER)
    return CUPTI_ERROR_INVALID_PARAMETER;
  if (*valueSize < sizeof(std::uint8_t)) return CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
  State& s = state();
  std::lock_guard lock(s.mu);
  *static_cast<std::uint8_t*>(value) = s.per_thread_buffers ? 1 : 0;
  *valueSize = sizeof(std::uint8_t);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId, size_t* dropped) {
  (void)context, (void)streamId;
  if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = state();
  std::lock_guard lock(s.mu);
  *dropped = s.dropped;
  s.dropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t validBufferSizeBytes, CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  std::size_t at = 0;
  if (*record) {
    const auto* previous = reinterpret_cast<std::uint8_t*>(*record);
    at = static_cast<std::size_t>(previous - buffer) + record_size((*record)->kind);
  }
  at = aligned(buffer, at);
  if (at >= validBufferSizeBytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  auto* next = reinterpret_cast<CUpti_Activity*>(buffer + at);
  const std::size_t size = record_size(next->kind);
  if (size == 0 || at + size > validBufferSizeBytes) return CUPTI_ERROR_INVALID_KIND;
  *record = next;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
  CUpti_TimestampCallbackFunc callback;
  {
    State& s = state();
    std::lock_guard lock(s.mu);
    callback = s.timestamp;
  }
  *timestamp = callback ? callback() : private_clock();
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc funcTimestamp) {
  if (!funcTimestamp) return CUPTI_ERROR_INVALID_PARAMETER;
  const ClockPair anchor = sample_clocks(funcTimestamp);
  State& s = state();
  std::lock_guard lock(s.mu);
  s.timestamp = funcTimestamp;
  s.anchor_raw = anchor.raw;
  s.anchor_client = anchor.client;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetDeviceId(CUcontext context, uint32_t* deviceId) {
  if (!deviceId) return CUPTI_ERROR_INVALID_PARAMETER;
  if (context) return CUPTI_ERROR_INVALID_CONTEXT;  // the simulation has no driver contexts
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return CUPTI_ERROR_INVALID_DEVICE;
  *deviceId = static_cast<uint32_t>(device);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetStreamIdEx(CUcontext context, CUstream stream, uint8_t perThreadStream, uint32_t* streamId) {
  if (!streamId) return CUPTI_ERROR_INVALID_PARAMETER;
  if (context) return CUPTI_ERROR_INVALID_STREAM;
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  if (!s && perThreadStream) s = cudaStreamPerThread;
  return simcudaGetStreamId(s, streamId) == cudaSuccess ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_STREAM;
}

// Detaches: no more records, the client's buffers returned (also empty ones), the subscriber and
// callbacks forgotten, so that a client can start again.
CUptiResult cuptiFinalize(void) {
  for (std::atomic<bool>* flag : {&g_kernel, &g_concurrent_kernel, &g_memcpy, &g_memset, &g_runtime,
                                  &g_external_correlation, &g_synchronization, &g_some_runtime_api})
    flag->store(false);
  simcudaSetActivitySink(nullptr);
  flush(true);
  State& s = state();
  std::lock_guard lock(s.mu);
  s.subscriber.reset();
  s.subscriber_name.clear();
  s.requested = nullptr;
  s.completed = nullptr;
  s.dropped = 0;
  s.timestamp = nullptr;
  s.per_thread_buffers = true;
  s.runtime_on.clear();
  s.runtime_off.clear();
  return CUPTI_SUCCESS;
}

}  // extern "C"
