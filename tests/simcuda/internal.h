// Internals shared by the files of the simulated CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace simcuda {

// ---- memory registry (registry.cpp) ----
enum class MemKind { Device, PinnedAlloc, PinnedRegistered };

struct Range {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  MemKind kind = MemKind::Device;
  int device = 0;
};

void registerRange(const Range& r);
// Removes the range starting exactly at base; returns it if there was one.
std::optional<Range> unregisterRange(std::uintptr_t base);
std::optional<Range> findRange(const void* p);
bool overlapsAny(std::uintptr_t base, std::size_t size);
// Whether host code must wait for an async copy touching p (pageable host memory).
inline bool isPageable(const void* p) { return !findRange(p).has_value(); }

// ---- devices (runtime.cpp) ----
int deviceCount();
int currentDevice();

// ---- streams and events (stream.cpp) ----
using Clock = std::chrono::steady_clock;

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  Stream(int device, unsigned flags, int priority, bool legacy)
      : device_(device), flags_(flags), priority_(priority), legacy_(legacy) {}
  void start();
  // Appends op; returns its ticket (1-based position in the stream's history).
  std::uint64_t push(std::function<void()> op);
  // Blocks until the op with this ticket (and everything before it) has run.
  void waitTicket(std::uint64_t ticket);
  bool idle();
  std::uint64_t lastTicket();
  bool reached(std::uint64_t ticket);
  // The worker exits once the queue is drained; the object lives while the worker runs.
  void stop();

  int device() const { return device_; }
  unsigned flags() const { return flags_; }
  int priority() const { return priority_; }
  bool legacy() const { return legacy_; }
  bool blocking() const { return !(flags_ & cudaStreamNonBlocking); }

 private:
  void run();
  int device_;
  unsigned flags_;
  int priority_;
  bool legacy_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t enqueued_ = 0, completed_ = 0;
  bool stopping_ = false;
};

struct Event {
  explicit Event(unsigned f) : flags(f) {}
  unsigned flags;
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0;  // number of cudaEventRecord calls
  std::uint64_t done = 0;      // highest record sequence the stream has reached
  Clock::time_point stamp{};
};

// Resolves a handle; the special handles 0, cudaStreamLegacy and cudaStreamPerThread map to the
// legacy default stream of the current device. Null if the handle is unknown.
std::shared_ptr<Stream> resolveStream(cudaStream_t s);
std::shared_ptr<Stream> legacyStream(int device);
cudaStream_t createStream(int device, unsigned flags, int priority);
bool destroyStream(cudaStream_t s);
// Enqueues with the implicit synchronisation of the legacy default stream.
std::uint64_t enqueue(const std::shared_ptr<Stream>& s, std::function<void()> op);
// Waits for all work queued so far on every stream of the device.
void synchronizeDevice(int device);

cudaEvent_t createEvent(unsigned flags);
std::shared_ptr<Event> resolveEvent(cudaEvent_t e);
bool destroyEvent(cudaEvent_t e);

}  // namespace simcuda
