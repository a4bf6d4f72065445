#include "recorder.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "communicators.hpp"
#include "environment.hpp"
#include "gpu_activity.hpp"
#include "gpu_timing.hpp"
#include "group_timing.hpp"
#include "identity.hpp"
#include "pinned_ranges.hpp"
#include "sampler.hpp"
#include "segment.hpp"
#include "stacks.hpp"
#include "trainshim/clock.hpp"
#include "trainshim/collector_launch.hpp"
#include "trainshim/names.hpp"

namespace trainshim::shim {

namespace detail {
std::atomic<int> g_state{Uninitialized};
Recorder* g_recorder = nullptr;
std::atomic<uint64_t> g_generation{1};
// Read by every hooked call, written every few seconds: a cache line of its own.
alignas(64) std::atomic<uint64_t> g_next_collector_check{UINT64_MAX};
}  // namespace detail

namespace {

using namespace detail;

std::atomic<uint64_t> g_lost_while_starting{0};

// The file that maps `address`, as the kernel names it: an absolute path, whatever the process's
// working directory is now. (A relative LD_PRELOAD was resolved against the directory the
// process started in, and dladdr still reports it relative.)
std::string mapped_file(uintptr_t address) {
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string found, line;
  char buffer[4096];
  ssize_t n;
  while (found.empty() && (n = read(fd, buffer, sizeof buffer)) > 0) {
    for (ssize_t i = 0; i < n && found.empty(); ++i) {
      if (buffer[i] != '\n') {
        line.push_back(buffer[i]);
        continue;
      }
      // "start-end perms offset dev inode   path"
      char* rest = nullptr;
      const uintptr_t begin = std::strtoull(line.c_str(), &rest, 16);
      const uintptr_t end = *rest == '-' ? std::strtoull(rest + 1, nullptr, 16) : 0;
      const auto slash = line.find('/');
      if (address >= begin && address < end && slash != std::string::npos) found = line.substr(slash);
      line.clear();
    }
  }
  close(fd);
  // A library rebuilt while the job runs: the directory still holds its collector.
  constexpr std::string_view kDeleted = " (deleted)";
  if (found.ends_with(kDeleted)) found.resize(found.size() - kDeleted.size());
  return found;
}

// The collector beside this library; empty, with `why` set, when it cannot be named safely: a
// relative path would be looked up wherever the process has changed directory to.
std::string collector_path(std::string& why) {
  if (const char* path = std::getenv("TRAINSHIM_COLLECTOR"); path && *path) {
    if (path[0] == '/') return path;
    why = std::string("TRAINSHIM_COLLECTOR=") + path +
          " is a relative path, it would be looked up in whatever directory the process is in; give an absolute one";
    return {};
  }
  std::string self = mapped_file(reinterpret_cast<uintptr_t>(&detail::start_recording));
  if (self.empty()) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&detail::start_recording), &info) != 0 && info.dli_fname) self = info.dli_fname;
  }
  if (self.empty() || self[0] != '/') {
    why = "the shim's own path (" + self +
          ") is not absolute, the collector beside it would be looked up in "
          "whatever directory the process is in; preload the shim by an absolute path";
    return {};
  }
  return self.substr(0, self.rfind('/')) + "/trainshim-collector";
}

// What every check needs, set once the process records. Only the thread that took the due
// check (g_next_collector_check set to all ones) touches it until it sets the next one.
struct CollectorWatch {
  std::string job;
  std::string path;
  uint64_t due_ns = 0;  // CLOCK_MONOTONIC
  int started = 0;
  bool told_refused = false;
  bool told_no_lock = false;
};
CollectorWatch g_watch;
constexpr uint64_t kCollectorCheckNs = 2'000'000'000;
// A collector that cannot start (its database cannot be written, say) exits at once, each time
// with a message: a process starts this many, then leaves the job to `trainshim collect`.
constexpr int kMaxCollectorStarts = 3;

// Sets the tick at which the due check comes. Before the counter's rate is known, a tick counts
// as a nanosecond: time-stamp counters run at 1 GHz or more, so the check comes early, then
// sets itself again with the rate measured since the segment's anchor.
void arm_collector_check(uint64_t now_ticks, uint64_t now_ns) {
  const SegmentHeader* header = g_recorder->header();
  double ticks_per_ns = 1.0;
  if (kClockKind == ClockKind::Tsc && now_ns > header->anchor_monotonic_ns + 50'000'000 &&
      now_ticks > header->anchor_ticks)
    ticks_per_ns = double(now_ticks - header->anchor_ticks) / double(now_ns - header->anchor_monotonic_ns);
  const uint64_t wait_ns = g_watch.due_ns > now_ns ? g_watch.due_ns - now_ns : 0;
  g_next_collector_check.store(now_ticks + uint64_t(double(wait_ns) * ticks_per_ns), std::memory_order_release);
}

// One attempt to have a collector hold the job's lock. False when no later attempt can do better
// (the collector cannot be run): the checks stop.
bool ensure_collector() {
  if (g_watch.started == kMaxCollectorStarts) {
    if (collector_running(getuid(), g_watch.job)) return true;
    say("the job's collector stopped " + std::to_string(kMaxCollectorStarts) +
        " times (its messages are above, or in its database's log); this process starts no more: `trainshim collect "
        "--job " +
        g_watch.job + "` drains what it records");
    return false;
  }
  const Launch launch = launch_collector(g_watch.path, getuid(), g_watch.job,
                                         {"--job", g_watch.job, "--exit-when-idle"}, CollectorParent::Detached);
  if (!launch.refused.empty() && !g_watch.told_refused) {
    say(describe_refused(launch.refused));
    g_watch.told_refused = true;
  }
  switch (launch.result) {
    case LaunchResult::Started:
      ++g_watch.started;
      return true;
    case LaunchResult::AlreadyRunning:
      return true;
    case LaunchResult::NoLockFile:
      if (!g_watch.told_no_lock) say(launch.problem);
      g_watch.told_no_lock = true;
      return true;
    case LaunchResult::Failed:
      break;
  }
  say("could not start the collector: " + launch.problem + " (events wait in shared memory for `trainshim collect`)");
  return false;
}

void start_collector(const std::string& job) {
  if (environment_flag_off("TRAINSHIM_SPAWN_COLLECTOR")) return;
  std::string why;
  g_watch = CollectorWatch{.job = job, .path = collector_path(why)};
  if (g_watch.path.empty()) {
    say("no collector is started: " + why + " (events wait in shared memory for `trainshim collect`)");
    return;
  }
  if (!ensure_collector()) return;
  const uint64_t now_ns = clock_ns(CLOCK_MONOTONIC);
  g_watch.due_ns = now_ns + kCollectorCheckNs;
  arm_collector_check(ticks(), now_ns);
}

void reset_in_child() {
  // The parent's segment stays the parent's: the child holds no lock on it and keeps no handle.
  release_segment_in_child();
  g_state.store(Uninitialized, std::memory_order_relaxed);
  g_next_collector_check.store(UINT64_MAX, std::memory_order_relaxed);
  g_recorder = nullptr;
  g_generation.fetch_add(1, std::memory_order_relaxed);
  g_lost_while_starting.store(0, std::memory_order_relaxed);
  pinned_ranges().reset_after_fork();
  reset_stacks_after_fork();
  reset_communicators_after_fork();
  reset_timing_after_fork();
  reset_group_timing_after_fork();
  reset_gpu_timeline_after_fork();
  reset_sampler_after_fork();
  thread_state().busy = false;
}

void start() {
  if (const char* off = std::getenv("TRAINSHIM_DISABLE"); off && *off && std::string_view(off) != "0") {
    g_state.store(Disabled, std::memory_order_release);
    return;
  }
  try {
    const Identity id = identity_from_environment();
    SegmentHeader* header = create_segment(id);
    g_recorder = new Recorder(header);
    static std::atomic<bool> fork_handler_installed{false};
    if (!fork_handler_installed.exchange(true)) pthread_atfork(nullptr, note_fork_in_parent, reset_in_child);
    // Ready before the collector is started: the threads waiting for the segment record from
    // now on, and the collector finds a live segment.
    g_state.store(Ready, std::memory_order_release);
    header->dropped_not_ready.fetch_add(g_lost_while_starting.exchange(0), std::memory_order_relaxed);
    start_collector(id.job);
    // On this thread, before its first call goes on: the first window sees that call's work.
    start_gpu_timeline(*g_recorder);
    start_sampler(*g_recorder);
  } catch (const Refused& e) {
    say(e.what());
    g_state.store(Disabled, std::memory_order_release);
  } catch (const std::exception& e) {
    say(std::string("cannot create the shared-memory segment: ") + e.what() +
        "; recording is off, the job runs unchanged");
    g_state.store(Disabled, std::memory_order_release);
  } catch (...) {
    say("unexpected failure while starting; recording is off, the job runs unchanged");
    g_state.store(Disabled, std::memory_order_release);
  }
}

}  // namespace

namespace {

bool thread_gone(uint32_t tid) { return syscall(SYS_tgkill, getpid(), pid_t(tid), 0) != 0 && errno == ESRCH; }

// At a thread's exit: its ring goes back to whichever thread binds next. A hooked call after this
// (from a later destructor) binds again.
void unbind_ring(void* control) {
  ThreadState& thread = thread_state();
  if (thread.generation == g_generation.load(std::memory_order_relaxed) && thread.writer.control() == control) {
    uint32_t self = thread.tid;
    static_cast<RingControl*>(control)->owner.compare_exchange_strong(self, 0, std::memory_order_release);
  }
  thread.writer = {};
  thread.generation = 0;
}

// The key whose destructor gives a thread's ring back; nullopt if none could be had (then every
// thread shares the last ring).
const std::optional<pthread_key_t>& ring_key() {
  static const std::optional<pthread_key_t> key = []() -> std::optional<pthread_key_t> {
    pthread_key_t k;
    if (pthread_key_create(&k, unbind_ring) != 0) return std::nullopt;
    return k;
  }();
  return key;
}

}  // namespace

void Recorder::bind(ThreadState& thread) {
  thread.generation = g_generation.load(std::memory_order_relaxed);
  thread.tid = uint32_t(syscall(SYS_gettid));
  // The shim's own threads (the collective poller, CUPTI's) record outside any hook: not sampled.
  if (thread.busy) register_sampled_thread(thread.tid);
  thread.writer = {};
  thread.ring = header_->ring_count - 1;
  const auto& key = ring_key();
  if (!key) return;
  // A ring whose owner is gone (it died without running its thread's destructors, or its id is
  // now this thread's) is taken over: its head is where the owner's last record ended.
  for (uint32_t i = 0; i + 1 < header_->ring_count; ++i) {
    const RingView ring = ring_of(header_, i);
    std::atomic<uint32_t>& owner = ring.control()->owner;
    uint32_t current = owner.load(std::memory_order_acquire);
    if (current != 0 && current != thread.tid && !thread_gone(current)) continue;
    if (!owner.compare_exchange_strong(current, thread.tid, std::memory_order_acq_rel)) continue;
    thread.writer = OwnedRingWriter(ring);
    thread.ring = i;
    pthread_setspecific(*key, ring.control());
    return;
  }
}

namespace {

// A thread whose first calls come while another one creates the segment waits for it, holding
// nothing of the shim's, at most kStartWaitNs: creating a segment takes a few milliseconds, and a
// starter held up longer (by a lock this caller holds, say) must not hold the job up with it.
constexpr uint64_t kStartWaitNs = 100'000'000;

int wait_for_start() {
  const uint64_t deadline = clock_ns(CLOCK_MONOTONIC) + kStartWaitNs;
  int state = g_state.load(std::memory_order_acquire);
  for (unsigned spins = 0; state == Starting; state = g_state.load(std::memory_order_acquire)) {
    if (++spins % 64 == 0 && clock_ns(CLOCK_MONOTONIC) >= deadline) break;
    sched_yield();
  }
  return state;
}

}  // namespace

namespace detail {

void check_collector(uint64_t now_ticks) {
  uint64_t due = g_next_collector_check.load(std::memory_order_relaxed);
  if (now_ticks < due || !g_next_collector_check.compare_exchange_strong(due, UINT64_MAX, std::memory_order_acquire))
    return;
  const uint64_t now_ns = clock_ns(CLOCK_MONOTONIC);
  if (now_ns >= g_watch.due_ns) {
    if (!ensure_collector()) return;
    g_watch.due_ns = now_ns + kCollectorCheckNs;
  }
  arm_collector_check(now_ticks, now_ns);
}

Recorder* start_recording() {
  int state = g_state.load(std::memory_order_acquire);
  if (state == Uninitialized) {
    int expected = Uninitialized;
    if (g_state.compare_exchange_strong(expected, Starting, std::memory_order_acq_rel)) {
      start();
      return g_state.load(std::memory_order_acquire) == Ready ? g_recorder : nullptr;
    }
    state = expected;
  }
  if (state == Starting) state = wait_for_start();
  if (state == Ready) return g_recorder;
  if (state == Starting) {
    g_lost_while_starting.fetch_add(1);
    // The starter moves the count into the segment just after it is ready: a loss counted after
    // that move is moved here (each count is moved once, by whoever takes it).
    if (g_state.load() == Ready)
      if (const uint64_t late = g_lost_while_starting.exchange(0))
        g_recorder->header()->dropped_not_ready.fetch_add(late, std::memory_order_relaxed);
  }
  return nullptr;
}

}  // namespace detail

}  // namespace trainshim::shim
