#include "recorder.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "identity.hpp"
#include "communicators.hpp"
#include "gpu_timing.hpp"
#include "group_timing.hpp"
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

namespace bip = boost::interprocess;

constexpr uint32_t kDefaultRings = 8;
constexpr uint32_t kDefaultRingEvents = 16384;
// The first ring is taken by the first thread to record, in a training process the one making
// almost every call: at 10 M calls/s 131,072 records (12 MiB) last 13 ms of a collector's pause
// (measured: lossless over 12 s; 65,536 lost 0.016 %), 16,384 only 1.6 ms. The other rings keep
// the smaller size, so that a segment still fits a container's /dev/shm.
constexpr uint32_t kDefaultFirstRingEvents = 131072;
constexpr uint32_t kDefaultSideRecords = 2048;

// The descriptor that holds this image's segment's liveness lock (protocol.hpp), open for the
// image's life: closing any descriptor of the file would drop the lock.
int g_liveness_fd = -1;
std::atomic<uint64_t> g_lost_while_starting{0};
PinnedRanges g_pinned;

void say(std::string_view message) {
  std::string line = "trainshim: ";
  line.append(message);
  line.push_back('\n');
  [[maybe_unused]] auto ignored = write(STDERR_FILENO, line.data(), line.size());
}

// The variable's value when the whole string is a decimal number from 1 to `limit`. Anything else
// ("-1", "1e3", "abc", "0", too large) gets the default and a warning naming what was refused:
// strtoul would wrap "-1" to the maximum, a 2.9 GB segment per process.
uint32_t environment_count(const char* name, uint32_t fallback, uint32_t limit) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  uint64_t parsed = 0;
  const char* c = value;
  for (; *c >= '0' && *c <= '9' && parsed <= limit; ++c) parsed = parsed * 10 + uint64_t(*c - '0');
  if (*c == '\0' && parsed >= 1 && parsed <= limit) return uint32_t(parsed);
  std::string shown(value, std::min<std::size_t>(std::strlen(value), 64));
  for (char& ch : shown)
    if ((unsigned char)ch < 0x20 || ch == 0x7f) ch = '?';  // nothing that moves the terminal's cursor
  say(std::string(name) + "=\"" + shown + "\" is not a whole number from 1 to " + std::to_string(limit) +
      ": using the default " + std::to_string(fallback));
  return fallback;
}

bool environment_flag_off(const char* name) {
  const char* value = std::getenv(name);
  return value && (std::string_view(value) == "0" || std::string_view(value) == "off" ||
                   std::string_view(value) == "false");
}

uint32_t round_up_power_of_two(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Reads a small /proc file with plain syscalls (no stdio in someone else's process).
std::string read_small_file(const char* path) {
  std::string out;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buffer[1024];
  ssize_t n;
  while (out.size() < 8192 && (n = read(fd, buffer, sizeof buffer)) > 0) out.append(buffer, size_t(n));
  close(fd);
  return out;
}

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
    why = "the shim's own path (" + self + ") is not absolute, the collector beside it would be looked up in "
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
        "--job " + g_watch.job + "` drains what it records");
    return false;
  }
  const Launch launch = launch_collector(g_watch.path, getuid(), g_watch.job, {"--job", g_watch.job, "--exit-when-idle"},
                                         CollectorParent::Detached);
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
  say("could not start the collector: " + launch.problem +
      " (events wait in shared memory for `trainshim collect`)");
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
  if (g_liveness_fd >= 0) close(g_liveness_fd);
  g_liveness_fd = -1;
  g_state.store(Uninitialized, std::memory_order_relaxed);
  g_next_collector_check.store(UINT64_MAX, std::memory_order_relaxed);
  g_recorder = nullptr;
  g_generation.fetch_add(1, std::memory_order_relaxed);
  g_lost_while_starting.store(0, std::memory_order_relaxed);
  g_pinned.reset_after_fork();
  reset_stacks_after_fork();
  reset_communicators_after_fork();
  reset_timing_after_fork();
  reset_group_timing_after_fork();
  thread_state().busy = false;
}

// Refuses recording for this process; what() is the whole message for the user.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Gives the segment its pages now. A sparse segment (ftruncate alone) takes a tmpfs page at the
// first write to it, and when /dev/shm is full that write kills the job with SIGBUS.
void reserve(bip::shared_memory_object& shm, const std::string& name, uint64_t bytes) {
  int error;
  // tmpfs gives up a large reservation when a signal arrives (EINTR): a signal is no reason to stop.
  do error = posix_fallocate(shm.get_mapping_handle().handle, 0, off_t(bytes));
  while (error == EINTR);
  if (error == 0) return;
  bip::shared_memory_object::remove(name.c_str());
  const std::string dir(kShmDir);
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MiB", double(bytes) / double(1 << 20));
  if (error == ENOSPC)
    throw Refused(dir + " has no room for " + size + ": recording is off, the job runs unchanged; enlarge " + dir +
                  " (docker --shm-size) or lower TRAINSHIM_FIRST_RING_EVENTS/TRAINSHIM_RING_EVENTS/TRAINSHIM_RINGS");
  throw Refused("cannot reserve " + std::string(size) + " in " + dir + ": " + std::strerror(error) +
                "; recording is off, the job runs unchanged");
}

// Takes the liveness lock before the header is published, so that no collector ever sees a live
// segment unlocked. On a descriptor of its own, `shm`'s closed first: its closing would drop it.
void hold_liveness_lock(bip::shared_memory_object& shm, const std::string& name) {
  const int fd = fcntl(shm.get_mapping_handle().handle, F_DUPFD_CLOEXEC, 0);
  shm = bip::shared_memory_object();
  struct flock lock {};
  lock.l_type = F_RDLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0;
  lock.l_len = 1;
  if (fd < 0 || fcntl(fd, F_SETLK, &lock) != 0) {
    const int error = errno;
    if (fd >= 0) close(fd);
    bip::shared_memory_object::remove(name.c_str());
    throw std::runtime_error(std::string("cannot lock it to show it is in use: ") + std::strerror(error));
  }
  g_liveness_fd = fd;
}

SegmentHeader* create_segment(const Identity& id) {
  const uint32_t rings = environment_count("TRAINSHIM_RINGS", kDefaultRings, kMaxRings);
  const uint32_t capacity =
      round_up_power_of_two(environment_count("TRAINSHIM_RING_EVENTS", kDefaultRingEvents, kMaxRingCapacity));
  // Unless asked otherwise, the first ring is never smaller than the others.
  const uint32_t first_capacity = round_up_power_of_two(environment_count(
      "TRAINSHIM_FIRST_RING_EVENTS", std::max(kDefaultFirstRingEvents, capacity), kMaxRingCapacity));
  const uint32_t side_capacity =
      round_up_power_of_two(environment_count("TRAINSHIM_SIDE_RECORDS", kDefaultSideRecords, kMaxSideCapacity));
  const uint64_t bytes = segment_bytes(rings, first_capacity, capacity, side_capacity);

  bip::permissions owner_only;
  owner_only.set_permissions(0600);
  const std::string base = segment_name(getuid(), id.job, getpid());
  std::string name = base;
  bip::shared_memory_object shm;
  // A segment left by an earlier process with the same pid is not ours to reuse.
  for (int attempt = 1;; ++attempt) {
    try {
      shm = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write, owner_only);
      break;
    } catch (const bip::interprocess_exception& e) {
      if (e.get_error_code() != bip::already_exists_error || attempt == 16) throw;
      name = base + "." + std::to_string(attempt);
    }
  }
  reserve(shm, name, bytes);
  auto* region = new bip::mapped_region(shm, bip::read_write, 0, bytes);
  hold_liveness_lock(shm, name);

  auto* header = static_cast<SegmentHeader*>(region->get_address());
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  std::string command = read_small_file("/proc/self/cmdline");
  while (!command.empty() && command.back() == '\0') command.pop_back();
  for (char& c : command) if (c == '\0') c = ' ';
  init_segment_header(*header, rings, first_capacity, capacity, side_capacity,
                      {.pid = getpid(),
                       .rank = id.rank,
                       .local_rank = id.local_rank,
                       .world_size = id.world_size,
                       .clock_kind = kClockKind,
                       .anchor_monotonic_ns = clock_ns(CLOCK_MONOTONIC),
                       .anchor_ticks = ticks(),
                       .anchor_realtime_ns = clock_ns(CLOCK_REALTIME),
                       .host = host,
                       .job = id.job,
                       .command = command});
  header->producer_state.store(static_cast<uint32_t>(ProducerState::Live), std::memory_order_release);
  return header;
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
    if (!fork_handler_installed.exchange(true)) pthread_atfork(nullptr, nullptr, reset_in_child);
    // Ready before the collector is started: the threads waiting for the segment record from
    // now on, and the collector finds a live segment.
    g_state.store(Ready, std::memory_order_release);
    header->dropped_not_ready.fetch_add(g_lost_while_starting.exchange(0), std::memory_order_relaxed);
    start_collector(id.job);
  } catch (const Refused& e) {
    say(e.what());
    g_state.store(Disabled, std::memory_order_release);
  } catch (const std::exception& e) {
    say(std::string("cannot create the shared-memory segment: ") + e.what() + "; recording is off, the job runs unchanged");
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
  if (now_ticks < due ||
      !g_next_collector_check.compare_exchange_strong(due, UINT64_MAX, std::memory_order_acquire))
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

PinnedRanges& pinned_ranges() { return g_pinned; }

}  // namespace trainshim::shim
