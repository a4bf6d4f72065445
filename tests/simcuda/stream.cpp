// Streams are worker threads draining a FIFO of operations; events are stamped when a worker
// reaches them. The legacy default stream keeps its implicit synchronisation with blocking
// streams, because a profiler's findings about default-stream serialisation depend on it.
#include "internal.h"

#include <pthread.h>

#include <atomic>
#include <thread>
#include <unordered_map>
#include <vector>

namespace simcuda {

namespace {
thread_local bool tls_on_worker = false;
thread_local Clock::time_point tls_gpu_clock{};
}  // namespace

Clock::time_point gpu_now() { return tls_on_worker ? tls_gpu_clock : Clock::now(); }

void gpu_run_for(Clock::duration d) {
  if (!tls_on_worker) {
    std::this_thread::sleep_for(d);
    return;
  }
  tls_gpu_clock += d;
  std::this_thread::sleep_until(tls_gpu_clock);
}

void gpu_caught_up() {
  if (tls_on_worker) tls_gpu_clock = std::max(tls_gpu_clock, Clock::now());
}

void gpu_at_least(Clock::time_point t) {
  if (tls_on_worker) tls_gpu_clock = std::max(tls_gpu_clock, t);
}

void Stream::start() {
  // Detached: a program may exit without destroying its streams, and a joinable std::thread
  // destroyed at exit would terminate the process. The worker holds the Stream alive.
  std::thread([self = shared_from_this()] { self->run(); }).detach();
}

void Stream::run() {
  tls_on_worker = true;
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) break;
    // The op stays queued (moved-from) while it runs so that cudaStreamQuery sees it.
    std::function<void()> op = std::move(queue_.front().op);
    tls_gpu_clock = std::max(queue_.front().enqueued, last_end());
    lock.unlock();
    op();
    op = nullptr;  // release captures outside the lock
    last_end_.store(tls_gpu_clock.time_since_epoch().count());
    lock.lock();
    queue_.pop_front();
    ++completed_;
    done_cv_.notify_all();
  }
}

std::uint64_t Stream::push(std::function<void()> op) {
  std::lock_guard lock(mu_);
  queue_.push_back({Clock::now(), std::move(op)});
  work_cv_.notify_one();
  return ++enqueued_;
}

void Stream::wait_ticket(std::uint64_t ticket) {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ >= ticket; });
}

bool Stream::idle() {
  std::lock_guard lock(mu_);
  return completed_ == enqueued_;
}

std::uint64_t Stream::last_ticket() {
  std::lock_guard lock(mu_);
  return enqueued_;
}

bool Stream::reached(std::uint64_t ticket) {
  std::lock_guard lock(mu_);
  return completed_ >= ticket;
}

void Stream::stop() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  work_cv_.notify_one();
}

namespace {

struct Handles {
  std::mutex mu;
  std::unordered_map<Stream*, std::shared_ptr<Stream>> streams;  // user-created streams
  std::vector<std::shared_ptr<Stream>> legacy;                   // one per device, lazily
  std::unordered_map<Event*, std::shared_ptr<Event>> events;
  // Serialises enqueueing so that the tickets captured for implicit synchronisation form a
  // consistent order (waits only ever point at earlier work, so they cannot deadlock).
  std::mutex enqueue_mu;
};

// Stream ids as the driver numbers them (Nsight Systems shows them): the legacy stream of each
// context is 7, created streams count up from 13.
constexpr std::uint32_t kLegacyStreamId = 7;
std::atomic<std::uint32_t> g_next_stream_id{13};

// Leaked on purpose: workers outlive static destruction at exit.
Handles*& handles_pointer() {
  static Handles* h = new Handles;
  return h;
}

Handles& handles() { return *handles_pointer(); }

// A forked child has none of its parent's stream workers, and a lock a parent's thread held at the
// fork stays held: it starts with no streams (each device's legacy stream made again at its first
// use), as a real runtime is not usable across fork at all. The parent's are left, never freed.
void renew_handles_in_child() { handles_pointer() = new Handles; }
[[maybe_unused]] const int g_fork_handler = pthread_atfork(nullptr, nullptr, renew_handles_in_child);

// Operation that holds its stream until `other` has run `ticket`.
std::function<void()> wait_op(std::shared_ptr<Stream> other, std::uint64_t ticket) {
  return [other = std::move(other), ticket] {
    other->wait_ticket(ticket);
    gpu_at_least(other->last_end());
  };
}

std::vector<std::shared_ptr<Stream>> streams_of(int device) {
  Handles& h = handles();
  std::lock_guard lock(h.mu);
  std::vector<std::shared_ptr<Stream>> out;
  for (auto& [raw, s] : h.streams)
    if (s->device() == device) out.push_back(s);
  return out;
}

}  // namespace

std::shared_ptr<Stream> legacy_stream(int device) {
  Handles& h = handles();
  std::lock_guard lock(h.mu);
  if (h.legacy.empty()) h.legacy.resize(static_cast<std::size_t>(device_count()));
  if (device < 0 || static_cast<std::size_t>(device) >= h.legacy.size()) return nullptr;
  auto& slot = h.legacy[static_cast<std::size_t>(device)];
  if (!slot) {
    slot = std::make_shared<Stream>(device, cudaStreamDefault, 0, true, kLegacyStreamId);
    slot->start();
  }
  return slot;
}

std::shared_ptr<Stream> resolve_stream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return legacy_stream(currentDevice());
  Handles& h = handles();
  std::lock_guard lock(h.mu);
  auto it = h.streams.find(reinterpret_cast<Stream*>(s));
  return it == h.streams.end() ? nullptr : it->second;
}

cudaStream_t create_stream(int device, unsigned flags, int priority) {
  auto s = std::make_shared<Stream>(device, flags, priority, false, g_next_stream_id++);
  s->start();
  Handles& h = handles();
  std::lock_guard lock(h.mu);
  h.streams.emplace(s.get(), s);
  return reinterpret_cast<cudaStream_t>(s.get());
}

bool destroy_stream(cudaStream_t handle) {
  std::shared_ptr<Stream> s;
  {
    Handles& h = handles();
    std::lock_guard lock(h.mu);
    auto it = h.streams.find(reinterpret_cast<Stream*>(handle));
    if (it == h.streams.end()) return false;
    s = std::move(it->second);
    h.streams.erase(it);
  }
  // Like the real runtime: returns at once, queued work still completes.
  s->stop();
  return true;
}

std::uint64_t enqueue(const std::shared_ptr<Stream>& s, std::function<void()> op) {
  Handles& h = handles();
  std::lock_guard lock(h.enqueue_mu);
  if (s->legacy()) {
    // Work on the legacy stream waits for all earlier work on blocking streams of the device.
    for (auto& other : streams_of(s->device())) {
      if (!other->blocking()) continue;
      std::uint64_t t = other->last_ticket();
      if (!other->reached(t)) s->push(wait_op(other, t));
    }
  } else if (s->blocking()) {
    // ...and work on a blocking stream waits for earlier work on the legacy stream.
    auto legacy = legacy_stream(s->device());
    std::uint64_t t = legacy->last_ticket();
    if (!legacy->reached(t)) s->push(wait_op(legacy, t));
  }
  return s->push(std::move(op));
}

void synchronize_device(int device) {
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> todo;
  {
    Handles& h = handles();
    std::lock_guard lock(h.enqueue_mu);
    auto legacy = legacy_stream(device);
    if (legacy) todo.emplace_back(legacy, legacy->last_ticket());
    for (auto& s : streams_of(device)) todo.emplace_back(s, s->last_ticket());
  }
  for (auto& [s, t] : todo) s->wait_ticket(t);
}

cudaEvent_t create_event(unsigned flags, int device) {
  static std::atomic<std::uint32_t> next_id{1};
  auto e = std::make_shared<Event>(flags, device);
  e->id = next_id++;
  Handles& h = handles();
  std::lock_guard lock(h.mu);
  h.events.emplace(e.get(), e);
  return reinterpret_cast<cudaEvent_t>(e.get());
}

std::shared_ptr<Event> resolve_event(cudaEvent_t handle) {
  Handles& h = handles();
  std::lock_guard lock(h.mu);
  auto it = h.events.find(reinterpret_cast<Event*>(handle));
  return it == h.events.end() ? nullptr : it->second;
}

bool destroy_event(cudaEvent_t handle) {
  Handles& h = handles();
  std::lock_guard lock(h.mu);
  // Pending record operations keep their own reference, as the real runtime allows destroying
  // an event that is still pending.
  return h.events.erase(reinterpret_cast<Event*>(handle)) > 0;
}

}  // namespace simcuda
