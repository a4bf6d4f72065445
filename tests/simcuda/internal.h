// Internals shared by the files of the simulated CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>
#include <cupti_runtime_cbid.h>

#include "activity.h"

struct CUctx_st;  // cuda.h's context, opaque

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace simcuda {

// Records a failure as the calling thread's last error (cudaGetLastError), as every runtime call
// does; cudaErrorNotReady is a status, not an error, and is never recorded.
cudaError_t record_error(cudaError_t e);

// ---- memory registry (registry.cpp) ----
enum class MemKind { Device, PinnedAlloc, PinnedRegistered };

struct Range {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  MemKind kind = MemKind::Device;
  int device = 0;
};

void register_range(const Range& r);
// Removes the range starting exactly at base; returns it if there was one.
std::optional<Range> unregister_range(std::uintptr_t base);
std::optional<Range> find_range(const void* p);
bool overlaps_any(std::uintptr_t base, std::size_t size);
// Whether host code must wait for an async copy touching p (pageable host memory).
inline bool is_pageable(const void* p) { return !find_range(p).has_value(); }
simcudaMemoryKind memory_kind(const void* p);

// ---- devices (runtime.cpp) ----
int device_count();
// The memory of each device (cudaMemGetInfo's total, cudaDeviceProp::totalGlobalMem).
std::size_t simulated_memory_bytes();
// Whether the runtime used the device (its primary context is active), and marking it so.
bool device_used(int device);
void mark_device_used(int device);
// The opaque handle of a device's primary context.
CUctx_st* primary_context(int device);
int currentDevice();

// ---- streams and events (stream.cpp) ----
using Clock = std::chrono::steady_clock;

// The simulated GPU's clock. A GPU runs queued work back to back whatever its host's CPUs do;
// here a stream's worker is a thread that a loaded machine deschedules, so the GPU's time is kept
// apart from the wall clock it would otherwise lag: each operation starts when the one before it
// on its stream ended or when it was enqueued, whichever is later, and a kernel of duration d
// ends d later (the worker sleeps until then, or not at all when it is late). Only waits on what
// lies outside the stream (a peer rank, a host function, another stream's work or event) move it
// further. Stamps (events, activity records) are read from it. Outside a stream's worker: the wall
// clock.
Clock::time_point gpu_now();
// A kernel's run: the clock moves on by `d`, and the worker sleeps until the wall clock is there.
void gpu_run_for(Clock::duration d);
// After a wait on the wall clock (a peer, a host function): the clock is at least the wall clock.
void gpu_caught_up();
// After a wait for another stream's work or an event: the clock is at least that work's time.
void gpu_at_least(Clock::time_point t);

struct CaptureSequence;

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  Stream(int device, unsigned flags, int priority, bool legacy, std::uint32_t id)
      : device_(device), flags_(flags), priority_(priority), legacy_(legacy), id_(id) {}
  void start();
  // Appends op; returns its ticket (1-based position in the stream's history).
  std::uint64_t push(std::function<void()> op);
  // Blocks until the op with this ticket (and everything before it) has run.
  void wait_ticket(std::uint64_t ticket);
  bool idle();
  std::uint64_t last_ticket();
  bool reached(std::uint64_t ticket);
  // The worker exits once the queue is drained; the object lives while the worker runs.
  void stop();

  int device() const { return device_; }
  unsigned flags() const { return flags_; }
  int priority() const { return priority_; }
  bool legacy() const { return legacy_; }
  bool blocking() const { return !(flags_ & cudaStreamNonBlocking); }
  // The id its activity records carry (cuptiGetStreamIdEx).
  std::uint32_t id() const { return id_; }
  // The GPU clock (gpu_now) where its last completed operation ended.
  Clock::time_point last_end() const { return Clock::time_point(Clock::duration(last_end_.load())); }

  // The capture sequence this stream is recording into, if any (guarded by capture.cpp's lock).
  std::shared_ptr<CaptureSequence> capture;

 private:
  void run();
  int device_;
  unsigned flags_;
  int priority_;
  bool legacy_;
  std::uint32_t id_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  struct Queued {
    Clock::time_point enqueued;
    std::function<void()> op;
  };
  std::deque<Queued> queue_;
  std::uint64_t enqueued_ = 0, completed_ = 0;
  bool stopping_ = false;
  std::atomic<Clock::rep> last_end_{0};  // last_end()'s ticks
};

struct Event {
  Event(unsigned f, int d) : flags(f), device(d) {}
  unsigned flags;
  int device;  // the current device at creation: it can be recorded only on that device's streams
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0;  // number of cudaEventRecord calls
  std::uint64_t done = 0;      // highest record sequence the stream has reached
  Clock::time_point stamp{};
  std::uint32_t id = 0;           // what CUPTI's records name it by
  std::uint64_t captured_in = 0;  // id of the capture sequence its last record went into, 0: none
};

// Resolves a handle; the special handles 0, cudaStreamLegacy and cudaStreamPerThread map to the
// legacy default stream of the current device. Null if the handle is unknown.
std::shared_ptr<Stream> resolve_stream(cudaStream_t s);
std::shared_ptr<Stream> legacy_stream(int device);
cudaStream_t create_stream(int device, unsigned flags, int priority);
bool destroy_stream(cudaStream_t s);
// Enqueues with the implicit synchronisation of the legacy default stream.
std::uint64_t enqueue(const std::shared_ptr<Stream>& s, std::function<void()> op);
// Waits for all work queued so far on every stream of the device.
void synchronize_device(int device);

cudaEvent_t create_event(unsigned flags, int device);
std::shared_ptr<Event> resolve_event(cudaEvent_t e);
bool destroy_event(cudaEvent_t e);

// ---- activity reports to the simulated CUPTI (activity.cpp) ----
// An operation as the activity records describe it; traced() fills in device, stream and
// correlation.
struct Traced {
  simcudaActivity activity{};
  std::string name;  // a kernel's; the report points into this copy
};
// The op as the stream runs it: when the sink wants the kind now, the worker stamps its start and
// end and reports it. Called at the launching call, or at each graph launch for a graph's nodes.
std::function<void()> traced(const Stream& s, Traced t, std::function<void()> op);
// A copy as CUPTI's memcpy record describes it (CUpti_ActivityMemcpy6): its bytes and where they
// live, whatever kind of copy the call named. The runtime's and the driver's copies alike.
Traced memcpy_activity(const void* dst, const void* src, std::uint64_t bytes, bool async, std::uint64_t copies = 1);
// One runtime call as CUPTI traces it (CUpti_ActivityAPI): it has a correlation id, which the
// kernels, copies and memsets it launches carry (a graph launch's nodes share it), and, when the
// sink wants API records, it is reported with its start, end and result when it returns. Nested
// calls (a runtime function calling another) are the outermost one. A launch outside any ApiCall
// (a driver call) takes an id of its own.
struct ApiSync {  // what a synchronising call names
  simcudaSyncKind kind = SIMCUDA_SYNC_NONE;
  int device = 0;
  std::uint32_t stream_id = UINT32_MAX;
  std::uint32_t event_id = UINT32_MAX;
};
class ApiCall {
 public:
  explicit ApiCall(std::uint32_t cbid, ApiSync sync = {});
  ~ApiCall();
  ApiCall(const ApiCall&) = delete;
  ApiCall& operator=(const ApiCall&) = delete;
  cudaError_t returned(cudaError_t result) {
    result_ = result;
    return result;
  }
  std::uint32_t correlation() const { return correlation_; }

 private:
  std::uint32_t cbid_;
  ApiSync sync_;
  bool outermost_ = false;
  bool reported_ = false;
  std::uint32_t correlation_ = 0;
  std::uint64_t start_ns_ = 0;
  cudaError_t result_ = cudaSuccess;
};
// A runtime function's body run as one traced call.
template <class Body>
cudaError_t api_call(std::uint32_t cbid, Body&& body, ApiSync sync = {}) {
  ApiCall call(cbid, sync);
  return call.returned(body());
}
// What a synchronisation on a stream or an event names, for its SYNCHRONIZATION record; an unknown
// handle names nothing (the call fails anyway).
ApiSync stream_sync(cudaStream_t stream, simcudaSyncKind kind, cudaEvent_t event = nullptr);
ApiSync event_sync(cudaEvent_t event);

// ---- stream capture (capture.cpp) ----
// What a stream runs, made when it is enqueued: a graph makes it again at every launch, so that
// an event record in a graph takes a new sequence number each time, and a kernel reports a record
// for each launch.
using Work = std::function<std::function<void()>(const Stream& s)>;

struct Graph {
  std::vector<Work> nodes;
};

struct CaptureSequence {
  unsigned long long id;
  cudaStreamCaptureMode mode;
  std::thread::id thread;  // that began it
  Stream* origin;
  int device;
  bool invalidated = false;
  Graph* graph;
};

// Enqueues the work on the stream, or appends it to the graph the stream is capturing (ticket 0).
// Fails, with the error recorded, where stream capture forbids the use of this stream.
cudaError_t submit_work(const std::shared_ptr<Stream>& s, Work work, std::uint64_t* ticket);
// The check a potentially unsafe call makes first (see cudaThreadExchangeStreamCaptureMode): it
// fails, invalidating the captures that forbid it, when this thread may not make such calls now.
cudaError_t check_potentially_unsafe();
// Synchronising or querying a stream (or the legacy stream, or the device) is invalid while it,
// or anything it encompasses, is being captured: that capture is invalidated.
cudaError_t check_wait_on(const std::shared_ptr<Stream>& s);
cudaError_t check_device_wait(int device);
// The capture sequence with this id, if it is still active.
std::shared_ptr<CaptureSequence> active_capture(std::uint64_t id);
std::shared_ptr<CaptureSequence> capture_of(const Stream& s);
void invalidate(CaptureSequence& c);

// ---- submitting operations (runtime.cpp) ----
// Submits op on the stream (or into its capture), reported as `as` when given; with wait, returns
// once it ran (never for a captured op, which does not run at the call).
cudaError_t submit(cudaStream_t stream, std::function<void()> op, bool wait, std::optional<Traced> as = {});

}  // namespace simcuda
