#include "sampler.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "environment.hpp"
#include "owned_fd.hpp"
#include "python_stack.hpp"
#include "resolve.hpp"
#include "stacks.hpp"
#include "trainshim/clock.hpp"
#include "trainshim/ring.hpp"

extern char** environ;

namespace trainshim::shim {

namespace {

constexpr uint32_t kDefaultHz = 50;
constexpr uint32_t kMaxHz = 1000;
// The CPU time a second the sampler may spend on threads other than the main thread
// (TRAINSHIM_SAMPLE_BUDGET_US): 0.2 % of a core.
constexpr uint32_t kDefaultBudgetUs = 2000;
constexpr int kMaxThreads = 64;  // program threads sampled besides the main thread
constexpr uint64_t kCensusNs = 1'000'000'000;
constexpr std::size_t kMaxThreadNames = 256;  // threads a census names
constexpr std::size_t kMaxWorkersRemembered = 65536;
// PyTorch names its DataLoader worker processes: torch/utils/data/_utils/worker.py _worker_loop
// calls torch.multiprocessing._set_thread_name("pt_data_worker"); its main branch renamed the
// loop _process_worker_loop and the name "pt_multiprocess_data_worker", which c10::setThreadName
// cuts to 15 characters before pthread_setname_np (the worker's main thread, which
// /proc/<pid>/comm shows).
constexpr std::string_view kWorkerNames[] = {"pt_data_worker", "pt_multiprocess"};

bool is_worker_name(std::string_view comm) {
  return std::find(std::begin(kWorkerNames), std::end(kWorkerNames), comm) != std::end(kWorkerNames);
}

// The loop a DataLoader worker's main thread runs until the loader ends, by name and file.
constexpr std::string_view kWorkerLoops[] = {"_worker_loop", "_process_worker_loop"};
constexpr std::string_view kWorkerLoopFile = "torch/utils/data/_utils/worker.py";

// The program threads to sample: a slot is taken by a compare-exchange on its tid, its pthread_t
// stored after (0: not yet usable); given back when the thread exits.
struct Registered {
  std::atomic<uint32_t> tid{0};
  std::atomic<uint64_t> pthread{0};
};
Registered g_registered[kMaxThreads];

std::atomic<int> g_device{-1};  // the last cudaSetDevice's device; -1: none
// When the next census is due because the process forked (CLOCK_MONOTONIC ns; 0: none): a
// DataLoader's workers may live for less than the census period.
std::atomic<uint64_t> g_census_after_fork_ns{0};
// Long enough for a forked worker to name itself (the first thing its loop does).
constexpr uint64_t kCensusAfterForkNs = 100'000'000;
std::atomic<bool> g_exiting{false};

// At a registered thread's exit (a thread-specific value's destructor): its slot is free again.
void unregister(void* value) {
  Registered& slot = g_registered[reinterpret_cast<uintptr_t>(value) - 1];
  uint32_t self = uint32_t(syscall(SYS_gettid));
  if (slot.tid.load(std::memory_order_acquire) != self) return;
  slot.pthread.store(0, std::memory_order_release);
  slot.tid.compare_exchange_strong(self, 0, std::memory_order_acq_rel);
}

const pthread_key_t* registration_key() {
  static const pthread_key_t* key = []() -> const pthread_key_t* {
    static pthread_key_t k;
    return pthread_key_create(&k, unregister) == 0 ? &k : nullptr;
  }();
  return key;
}

// A sampled thread: its /proc files, what was learnt of it, and its last sample while asleep. The
// main thread's files (its stat file, and its syscall file once it was found not running) are
// `held` between ticks until the sampler is refused a descriptor; another thread's are open only
// while it is read, one after the other. So the sampler holds at most 2 descriptors between ticks
// (none once refused) and 3 while it reads another thread; with the memory file the hooks share
// (soft_read.hpp), 4 in all.
struct TaskFiles {
  uint32_t tid = 0;
  bool held = false;          // the stat file, and the syscall file when open
  OwnedFd stat;               // -1: not there, or not open
  OwnedFd syscall;            // -1: not there (gVisor has no syscall file, say), or not open
  python::ThreadHint python;  // where its Python thread state was found
  // The state, system call and stack of its last sample, read while it slept, and its CPU time
  // then: while that stays the same the thread has not run since, and they are still its own.
  char asleep_state = 0;
  uint32_t asleep_stack = 0;
  uint64_t asleep_call = 0;
  uint64_t asleep_cpu_ns = UINT64_MAX;
};

struct Sampler {
  Recorder* recorder = nullptr;
  uint32_t hz = kDefaultHz;
  pid_t pid = 0;
  std::string sysfs;        // TRAINSHIM_SYSFS or /sys
  std::string environment;  // the env.<NAME> facts, read at start
  TaskFiles main;
  TaskFiles threads[kMaxThreads];
  // The CPU time a tick may still spend reading the other threads in full (ns; negative: the
  // overrun of earlier ticks, repaid first), and the slot the next tick starts them from.
  int64_t credit_ns = 0;
  int64_t credit_per_tick_ns = 0;
  int next_slot = 0;
  bool hold_main = true;  // false once refused a descriptor: the program is at its limit
  uint32_t tick = 0;
  bool python = false;  // the process runs a CPython whose stacks can be read
  uint64_t random = 0;
  uint64_t next_census_ns = 0;
  std::vector<pid_t> workers_seen;               // sorted
  std::map<uint32_t, std::string> thread_names;  // tid -> name, as the last census published them
  int facts_device = -2;                         // the device the facts were published for; -2: none published
  uint64_t next_facts_ns = 0;                    // when publishing them may be tried again (CLOCK_MONOTONIC)
  uint32_t next_facts_id = 1;
  sigset_t program_signals;  // the mask of the thread that started recording
  // The runtime's functions, looked up until found: each lookup may walk the loaded objects
  // (dl_iterate_phdr, under the loader's lock, which a child forked meanwhile would never get).
  void* get_bus_id = nullptr;
  void* get_device_count = nullptr;
};

// Made by start_sampler, used by its thread alone (and by reset_sampler_after_fork in a child,
// where that thread no longer runs). Never destroyed: the thread may run while the process exits.
std::atomic<Sampler*> g_sampler{nullptr};

void close_descriptors(TaskFiles& files) {
  for (OwnedFd* fd : {&files.stat, &files.syscall}) close_owned(*fd);
  files.held = false;
}

void forget(TaskFiles& files) {
  close_descriptors(files);
  files = TaskFiles{};
}

// `refused`: set when the file could not be opened for want of a descriptor.
OwnedFd open_task_file(uint32_t tid, const char* name, bool& refused) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%u/%s", tid, name);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && (errno == EMFILE || errno == ENFILE)) refused = true;
  return own(fd);
}

// Opens the thread's stat file, unless the one held is still open. False when the thread is gone
// (its task directory no longer exists).
bool open_stat(TaskFiles& files, bool& refused) {
  if (files.held && still_owned(files.stat)) return true;
  close_descriptors(files);
  files.stat = open_task_file(files.tid, "stat", refused);
  return files.stat.fd >= 0 || errno != ENOENT || access("/proc/self/task", F_OK) != 0;
}

// The thread's CPU time (ns), from its CPU-time clock: no descriptor, no /proc file formatted. All
// ones when it cannot be read (the thread is gone). A sleeping thread's stays the same until it
// runs again.
uint64_t thread_cpu_ns(uint32_t tid) {
  // The kernel's clock id of a thread of this process (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)),
  // what pthread_getcpuclockid returns, made from the tid alone: a thread that exited makes it
  // invalid (EINVAL), never another process's thread.
  constexpr uint32_t kPerThreadScheduler = 4 | 2;
  const auto clock = clockid_t((~tid << 3) | kPerThreadScheduler);
  timespec now{};
  if (clock_gettime(clock, &now) != 0) return UINT64_MAX;
  return uint64_t(now.tv_sec) * 1'000'000'000ULL + uint64_t(now.tv_nsec);
}

struct AsleepCheck {
  uint32_t tid;
  uint64_t cpu_before;
  bool confirmed = false;
};

bool stayed_asleep(void* context) {
  auto* check = static_cast<AsleepCheck*>(context);
  check->confirmed = thread_cpu_ns(check->tid) == check->cpu_before;
  return check->confirmed;
}

// The state letter from a stat file; 0 when unknown, -1 when the thread is gone.
int read_state(int fd) {
  if (fd < 0) return 0;
  char text[512];
  const ssize_t n = pread(fd, text, sizeof text - 1, 0);
  if (n < 0) return errno == ESRCH ? -1 : 0;
  text[n] = '\0';
  // "tid (comm) S ...": the name may hold spaces and parentheses, the last ')' ends it.
  const char* end = std::strrchr(text, ')');
  return end && end[1] == ' ' && std::isalpha(static_cast<unsigned char>(end[2])) ? end[2] : 0;
}

// The thread's state letter (0: unknown) and the system call it is blocked in + 1 (0: running,
// in user space, or unknown), from its stat file and, unless it is running, its syscall file.
// `held`: both stay open (the main thread's); else one is open at a time: the stat file is closed
// before the syscall file is opened, and the syscall file when done. False when the thread is gone.
bool read_task(TaskFiles& files, bool held, char& state, uint64_t& call, bool& refused) {
  char text[512];
  state = 0;
  call = 0;
  int before = read_state(files.stat.fd);
  const auto open_syscall = [&] {
    if (!held) close_owned(files.stat);
    if (files.syscall.fd < 0 || !still_owned(files.syscall))
      files.syscall = open_task_file(files.tid, "syscall", refused);
  };
  if (before > 0 && before != 'R') open_syscall();
  // A thread that woke between the two reads would be "sleeping" in no system call: its state is
  // then read again after the system call, and both once more if it changed.
  for (int attempt = 0; attempt < 2 && before >= 0; ++attempt) {
    call = 0;
    // A running (or runnable) thread is blocked in no system call: its syscall file is not read.
    if (files.syscall.fd >= 0 && before != 'R') {
      // "nr arg1 ... sp pc" while blocked; "-1 sp pc" in user space; "running" on a processor.
      const ssize_t n = pread(files.syscall.fd, text, sizeof text - 1, 0);
      if (n > 0 && text[0] >= '0' && text[0] <= '9') {
        uint64_t nr = 0;
        for (ssize_t i = 0; i < n && text[i] >= '0' && text[i] <= '9' && nr < 4096; ++i)
          nr = nr * 10 + uint64_t(text[i] - '0');
        if (nr < 4096) call = nr + 1;
      }
    }
    // Sleeping (or in disk wait) in no system call: the thread moved between the reads.
    const bool moved = (before == 'S' || before == 'D') && call == 0 && files.syscall.fd >= 0;
    if (!moved) break;
    if (files.stat.fd < 0) {
      close_owned(files.syscall);
      files.stat = open_task_file(files.tid, "stat", refused);
      if (files.stat.fd < 0 && errno == ENOENT) before = -1;
    }
    const int after = files.stat.fd >= 0 ? read_state(files.stat.fd) : before;
    if (after == before || after < 0) {
      before = after;
      break;
    }
    before = after;
    if (before != 'R') open_syscall();
  }
  if (!held) close_descriptors(files);
  if (before < 0) return false;
  state = char(before);
  return true;
}

// How a thread's sample was made: its last asleep sample repeated (it has not run since), or read
// in full; or the thread is gone.
enum class Turn { Repeated, Read, Gone };

// Writes the thread's sample; `state`: its state letter (0: unknown).
Turn sample_thread(Sampler& s, TaskFiles& files, uint64_t pthread, bool main_thread, char& state) {
  SegmentHeader* header = s.recorder->header();
  const uint64_t begin = ticks();
  state = 0;
  uint64_t call = 0;
  uint32_t stack = 0;
  // Read before the state: a thread sleeping when the state is read, whose CPU time stays the same
  // until after its frames were read, did not run while they were read.
  const uint64_t cpu_before = thread_cpu_ns(files.tid);
  Turn turn = Turn::Read;
  if (cpu_before != UINT64_MAX && cpu_before == files.asleep_cpu_ns) {
    // Asleep where its last sample found it (or woken and not yet run: the wake-up is the same).
    turn = Turn::Repeated;
    state = files.asleep_state;
    call = files.asleep_call;
    stack = files.asleep_stack;
  } else {
    bool refused = false;
    const bool hold = main_thread && s.hold_main;
    const bool there = open_stat(files, refused) && read_task(files, hold, state, call, refused);
    if (refused && s.hold_main) {
      s.hold_main = false;
      close_descriptors(s.main);
    }
    files.held = there && hold && s.hold_main;
    if (!files.held) close_descriptors(files);
    if (!there) return Turn::Gone;
    const bool asleep = (state == 'S' || state == 'D') && cpu_before != UINT64_MAX;
    AsleepCheck check{files.tid, cpu_before};
    if (s.python) {
      python::RawFrame frames[kMaxPythonFrames];
      bool torn = false;
      const python::Capture captured =
          python::capture_thread(pthread, main_thread, files.python, frames, int(kMaxPythonFrames), torn,
                                 asleep ? stayed_asleep : nullptr, &check);
      if (torn) {
        header->samples_torn.fetch_add(1, std::memory_order_relaxed);
        check.confirmed = false;
      } else if (captured.count > 0) {
        stack = sampled_python_stack(header, frames, captured);
      }
    } else if (asleep) {
      stayed_asleep(&check);
    }
    files.asleep_cpu_ns = check.confirmed ? cpu_before : UINT64_MAX;
    files.asleep_state = state;
    files.asleep_stack = stack;
    files.asleep_call = call;
  }
  const uint64_t end = ticks();
  s.recorder->record_about(files.tid, [&](EventRecord& r) {
    r = EventRecord{};
    r.begin_ticks = begin;
    r.end_ticks = end;
    r.python_stack = stack;
    r.object = uint8_t(state);
    r.detail = call;
    r.sequence = s.tick;
    r.api = static_cast<uint16_t>(Api::threadSample);
  });
  return turn;
}

// Whether every thread but the sampler has exited (a zombie main thread that called pthread_exit,
// the others gone): then the process ends only once the sampler does.
bool alone(const Sampler& s) {
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return false;
  const uint32_t self = uint32_t(syscall(SYS_gettid));
  bool others = false;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const uint32_t tid = uint32_t(std::strtoul(entry->d_name, nullptr, 10));
    if (tid == self) continue;
    TaskFiles files;
    files.tid = tid;
    char state = 0;
    uint64_t call = 0;
    bool refused = false;
    if (open_stat(files, refused) && read_task(files, false, state, call, refused) && state != 'Z' && state != 'X')
      others = true;
    close_descriptors(files);
    if (others) break;
  }
  closedir(tasks);
  return !others && s.pid != 0;
}

// The first line of a small regular file, without its newline; empty when unreadable. Never waits:
// a FIFO or a device planted under TRAINSHIM_SYSFS would stop the sampler's thread for good.
std::string first_line(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return {};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return {};
  }
  char text[4096];
  const ssize_t n = read(fd, text, sizeof text);
  close(fd);
  if (n <= 0) return {};
  std::string line(text, std::size_t(n));
  line.resize(std::min(line.find('\n'), line.size()));
  return line;
}

// The CPU time (user + system) of a process in ns, from /proc/<pid>/stat's utime and stime.
uint64_t cpu_ns(pid_t pid) {
  const std::string stat = first_line("/proc/" + std::to_string(pid) + "/stat");
  const auto end = stat.rfind(')');
  if (end == std::string::npos) return 0;
  // Fields after the name, from the state (field 3): utime is field 14, stime field 15.
  const char* field = stat.c_str() + end + 1;
  uint64_t values[2] = {0, 0};
  for (int index = 3; index <= 15 && *field; ++index) {
    while (*field == ' ') ++field;
    if (index >= 14) values[index - 14] = std::strtoull(field, nullptr, 10);
    while (*field && *field != ' ') ++field;
  }
  static const long hz = sysconf(_SC_CLK_TCK);
  return hz > 0 ? (values[0] + values[1]) * (1'000'000'000ULL / uint64_t(hz)) : 0;
}

std::string executable(const std::string& pid) {
  char path[4096];
  const ssize_t n = readlink(("/proc/" + pid + "/exe").c_str(), path, sizeof path);
  return n > 0 ? std::string(path, std::size_t(n)) : std::string();
}

// A child forked from this process, still running its image, whose main thread is inside the
// DataLoader's worker loop: a worker whatever its name (PyTorch before 2.0 left its workers
// unnamed). Its frames are read from its memory at the addresses it inherited; the code objects
// they name are ours as well (the module was imported before the fork), read softly.
bool in_worker_loop(pid_t child) {
  static const std::string own_image = executable("self");
  if (python::interpreter_version().empty() || own_image.empty() || executable(std::to_string(child)) != own_image)
    return false;
  python::RawFrame frames[kMaxPythonFrames];
  python::ThreadHint hint;
  bool torn = false;
  const python::Capture captured =
      python::capture_thread(0, true, hint, frames, int(kMaxPythonFrames), torn, nullptr, nullptr, child);
  for (int i = 0; i < captured.count; ++i) {
    python::CodeInfo code;
    if (python::describe_code(frames[i].code, true, code) && code.file.ends_with(kWorkerLoopFile) &&
        std::find(std::begin(kWorkerLoops), std::end(kWorkerLoops), code.function) != std::end(kWorkerLoops))
      return true;
  }
  return false;
}

// Pushes "key=value\n" lines as Facts records, whole lines per record; a line longer than a record
// is left out. False when the side ring is full.
bool push_facts(Sampler& s, const std::string& text) {
  SideRingView side = side_ring_of(s.recorder->header());
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = at;
    for (std::size_t next; (next = text.find('\n', end)) != std::string::npos && next + 1 - at <= kSideTextBytes;)
      end = next + 1;
    if (end == at) {
      at = text.find('\n', at) + 1;
      continue;
    }
    SideRecord record{};
    record.kind = static_cast<uint16_t>(SideKind::Facts);
    record.id = s.next_facts_id;
    record.count = uint16_t(end - at);
    std::memcpy(record.text, text.data() + at, end - at);
    if (!side.push(record)) return false;
    ++s.next_facts_id;
    at = end;
  }
  return true;
}

// Publishes the names of the threads that appeared or renamed themselves since the last census
// (the thread.<TID> facts): the trace names their tracks. Tried again at the next census when the
// side ring is full.
void publish_thread_names(Sampler& s, std::map<uint32_t, std::string> names) {
  std::string text;
  for (const auto& [tid, name] : names)
    if (const auto known = s.thread_names.find(tid); known == s.thread_names.end() || known->second != name)
      text += std::string(kFactThreadPrefix) + std::to_string(tid) + "=" + name + "\n";
  if (push_facts(s, text)) s.thread_names = std::move(names);
}

// The process's threads, their names and its children (every thread's
// /proc/self/task/<tid>/children).
void census(Sampler& s) {
  uint64_t threads = 0;
  std::vector<pid_t> children;
  std::map<uint32_t, std::string> names;
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(tasks)) {
      if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
      ++threads;
      if (names.size() < kMaxThreadNames) {
        std::string name = first_line("/proc/self/task/" + std::string(entry->d_name) + "/comm");
        std::replace_if(
            name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < ' ' || c == 0x7f; }, '?');
        if (!name.empty()) names[uint32_t(std::strtoul(entry->d_name, nullptr, 10))] = std::move(name);
      }
      const int fd =
          open(("/proc/self/task/" + std::string(entry->d_name) + "/children").c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      std::string text;
      char buffer[4096];
      for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, std::size_t(n));
      close(fd);
      for (const char* c = text.c_str(); *c;) {
        char* after = nullptr;
        const long pid = std::strtol(c, &after, 10);
        if (after == c) break;
        if (pid > 0) children.push_back(pid_t(pid));
        c = after;
      }
    }
    closedir(tasks);
  }
  publish_thread_names(s, std::move(names));
  uint64_t workers = 0, workers_cpu = 0, others = 0;
  for (const pid_t child : children) {
    if (!is_worker_name(first_line("/proc/" + std::to_string(child) + "/comm")) && !in_worker_loop(child)) {
      ++others;
      continue;
    }
    ++workers;
    workers_cpu += cpu_ns(child);
    const auto at = std::lower_bound(s.workers_seen.begin(), s.workers_seen.end(), child);
    if ((at == s.workers_seen.end() || *at != child) && s.workers_seen.size() < kMaxWorkersRemembered)
      s.workers_seen.insert(at, child);
  }
  const uint64_t now = ticks();
  s.recorder->record_about(uint32_t(s.pid), [&](EventRecord& r) {
    r = EventRecord{};
    r.begin_ticks = now;
    r.end_ticks = now;
    r.bytes = threads;
    r.object = workers;
    r.detail = workers_cpu;
    r.sequence = uint32_t(s.workers_seen.size());
    r.rank_in_comm = uint32_t(others);
    r.api = static_cast<uint16_t>(Api::processSample);
  });
}

// The kernel's cpulist form: "0-3,8,10-11".
std::string cpu_list(const cpu_set_t& set) {
  std::string list;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    if (!list.empty()) list += ',';
    list += std::to_string(cpu);
    if (last > cpu) list += '-' + std::to_string(last);
    cpu = last;
  }
  return list;
}

// The environment facts, read on the thread that starts recording (another thread reading
// `environ` could race the program's setenv).
std::string environment_facts() {
  constexpr std::string_view kNamed[] = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                                         "LOCAL_WORLD_SIZE"};
  std::vector<std::string> lines;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string_view variable(*entry);
    const std::string_view name = variable.substr(0, variable.find('='));
    if (name.size() == variable.size()) continue;
    if (!name.starts_with("NCCL_") && std::find(std::begin(kNamed), std::end(kNamed), name) == std::end(kNamed))
      continue;
    std::string line = std::string(kFactEnvironmentPrefix) + std::string(variable);
    std::replace(line.begin(), line.end(), '\n', ' ');
    lines.push_back(line + "\n");
  }
  std::sort(lines.begin(), lines.end());
  std::string text;
  for (const auto& line : lines) text += line;
  return text;
}

// The device's PCI address as sysfs names it (lower case), through the real runtime, on this
// thread: a failure sets only the sampler's own last error.
std::string pci_bus_id(Sampler& s, int device) {
  using GetBusId = int (*)(char*, int, int);
  if (!s.get_bus_id) s.get_bus_id = runtime_function(Library::Cudart, "cudaDeviceGetPCIBusId");
  const auto get = reinterpret_cast<GetBusId>(s.get_bus_id);
  char id[32] = {};
  if (!get || get(id, int(sizeof id), device) != 0) return {};
  std::string text(id);
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

int device_count(Sampler& s) {
  using GetCount = int (*)(int*);
  if (!s.get_device_count) s.get_device_count = runtime_function(Library::Cudart, "cudaGetDeviceCount");
  const auto get = reinterpret_cast<GetCount>(s.get_device_count);
  int count = -1;
  return get && get(&count) == 0 ? count : -1;
}

// Publishes the facts (SideKind::Facts), in as many records as their lines need. False when the
// side ring is full: tried again at the next tick.
bool publish_facts(Sampler& s, int device) {
  std::string text;
  cpu_set_t affinity;
  CPU_ZERO(&affinity);
  // The main thread's (its id is the process's): the sampler's own was fixed when it was created.
  if (sched_getaffinity(s.pid, sizeof affinity, &affinity) == 0) text += "affinity=" + cpu_list(affinity) + "\n";
  if (const std::string online = first_line(s.sysfs + "/devices/system/cpu/online"); !online.empty())
    text += "cpus_online=" + online + "\n";
  const int used = device < 0 ? 0 : device;
  text += "device=" + std::to_string(used) + "\n";
  if (!g_exiting.load(std::memory_order_acquire)) {
    if (const int gpus = device_count(s); gpus >= 0) text += "gpus=" + std::to_string(gpus) + "\n";
    if (const std::string bus = pci_bus_id(s, used); !bus.empty()) {
      text += "gpu_pci_bus_id=" + bus + "\n";
      const std::string node = first_line(s.sysfs + "/bus/pci/devices/" + bus + "/numa_node");
      if (!node.empty()) {
        text += "gpu_numa_node=" + node + "\n";
        if (node != "-1") {
          const std::string cpus = first_line(s.sysfs + "/devices/system/node/node" + node + "/cpulist");
          if (!cpus.empty()) text += "gpu_numa_cpus=" + cpus + "\n";
        }
      }
    }
  }
  text += s.environment;
  return push_facts(s, text);
}

uint64_t next_random(Sampler& s) {
  s.random ^= s.random << 13;
  s.random ^= s.random >> 7;
  s.random ^= s.random << 17;
  return s.random;
}

// False when the sampler must end: every program thread has exited.
bool tick(Sampler& s) {
  ++s.tick;
  s.python = !python::interpreter_version().empty();
  const int device = g_device.load(std::memory_order_acquire);
  // At most once a second: a side ring left full (no collector drains it) or threads that keep
  // switching devices must not have the runtime asked at every tick.
  if (const uint64_t now = clock_ns(CLOCK_MONOTONIC);
      s.facts_device != (device < 0 ? 0 : device) && now >= s.next_facts_ns) {
    s.next_facts_ns = now + kCensusNs;
    if (publish_facts(s, device)) s.facts_device = device < 0 ? 0 : device;
  }

  uint32_t tids[kMaxThreads];
  uint64_t pthreads[kMaxThreads];
  uint64_t main_pthread = 0;
  for (int i = 0; i < kMaxThreads; ++i) {
    Registered& slot = g_registered[i];
    tids[i] = slot.tid.load(std::memory_order_acquire);
    pthreads[i] = slot.pthread.load(std::memory_order_acquire);
    // A slot given back and taken again between the two loads is skipped this tick.
    if (slot.tid.load(std::memory_order_acquire) != tids[i] || pthreads[i] == 0) tids[i] = 0;
    if (tids[i] == uint32_t(s.pid)) main_pthread = pthreads[i];
  }
  // The main thread every tick; the others in turn, from where the last tick stopped, while the
  // tick's credit lasts (a thread asleep since its last sample costs a clock read, one that ran is
  // read in full).
  s.main.tid = uint32_t(s.pid);
  char state = 0;
  if (sample_thread(s, s.main, main_pthread, true, state) != Turn::Gone && state == 'Z' && alone(s)) return false;
  s.credit_ns = std::min<int64_t>(s.credit_ns, 0) + s.credit_per_tick_ns;
  const uint64_t spent_before = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  const int64_t credit = s.credit_ns;
  int first_skipped = -1;
  for (int k = 0; k < kMaxThreads; ++k) {
    const int i = (s.next_slot + k) % kMaxThreads;
    TaskFiles& files = s.threads[i];
    const uint32_t tid = tids[i] == uint32_t(s.pid) ? 0 : tids[i];
    if (tid != files.tid) {
      forget(files);
      files.tid = tid;
    }
    if (!tid) continue;
    if (s.credit_ns <= 0) {
      if (first_skipped < 0) first_skipped = i;
      continue;
    }
    const Turn turn = sample_thread(s, files, pthreads[i], false, state);
    s.credit_ns = credit - int64_t(clock_ns(CLOCK_THREAD_CPUTIME_ID) - spent_before);
    if (turn == Turn::Gone) {
      // It exited without running its thread's destructors (or before they ran): its slot is free.
      uint32_t expected = tid;
      g_registered[i].pthread.store(0, std::memory_order_release);
      g_registered[i].tid.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
      forget(files);
    }
  }
  if (first_skipped >= 0) s.next_slot = first_skipped;

  const uint64_t now = clock_ns(CLOCK_MONOTONIC);
  uint64_t after_fork = g_census_after_fork_ns.load(std::memory_order_relaxed);
  const bool forked = after_fork != 0 && now >= after_fork;
  // A fork after this load leaves its own time in place.
  if (forked) g_census_after_fork_ns.compare_exchange_strong(after_fork, 0, std::memory_order_relaxed);
  if (now >= s.next_census_ns || forked) {
    census(s);
    s.next_census_ns = now + kCensusNs;
  }
  return true;
}

void* run(void* argument) {
  auto& s = *static_cast<Sampler*>(argument);
  // Named from itself: naming another thread opens its /proc comm file, on the program's thread.
  pthread_setname_np(pthread_self(), "trainshim-samp");
  // Any hooked call the runtime's functions make on this thread reaches the real one unrecorded.
  thread_state().busy = true;
  const uint64_t interval_ns = 1'000'000'000ULL / s.hz;
  for (;;) {
    // Uniform in [0.5, 1.5) intervals: a training loop of the sampler's period is not aliased.
    const uint64_t pause_ns = interval_ns / 2 + next_random(s) % interval_ns;
    timespec pause{time_t(pause_ns / 1'000'000'000ULL), long(pause_ns % 1'000'000'000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &pause, &pause) == EINTR) {
    }
    // Once the process exits, parked (its signals blocked) until the process ends: a thread that
    // returned would run its thread-specific destructors beside the runtime's teardown.
    if (g_exiting.load(std::memory_order_acquire)) {
      for (;;) ::pause();
    }
    if (g_sampler.load(std::memory_order_acquire) != &s) return nullptr;
    if (!tick(s)) break;
  }
  // The last thread to end runs the process's exit (its atexit handlers, which may call CUDA):
  // those calls are the program's, recorded as on any of its threads, with its signals.
  thread_state().busy = false;
  pthread_sigmask(SIG_SETMASK, &s.program_signals, nullptr);
  return nullptr;
}

}  // namespace

void register_sampled_thread(uint32_t tid) {
  for (Registered& slot : g_registered)
    if (slot.tid.load(std::memory_order_acquire) == tid) return;
  const pthread_key_t* key = registration_key();
  for (int i = 0; i < kMaxThreads; ++i) {
    Registered& slot = g_registered[i];
    uint32_t expected = 0;
    if (slot.tid.load(std::memory_order_relaxed) != 0 ||
        !slot.tid.compare_exchange_strong(expected, tid, std::memory_order_acq_rel))
      continue;
    slot.pthread.store(uint64_t(pthread_self()), std::memory_order_release);
    if (key) pthread_setspecific(*key, reinterpret_cast<void*>(uintptr_t(i) + 1));
    return;
  }
}

void note_device(int device) { g_device.store(device, std::memory_order_release); }

void start_sampler(Recorder& recorder) {
  SegmentHeader* header = recorder.header();
  const uint32_t hz = environment_number("TRAINSHIM_SAMPLE_HZ", kDefaultHz, 0, kMaxHz);
  if (hz == 0) {
    header->sampler.store(uint32_t(SamplerState::Off), std::memory_order_release);
    return;
  }
  auto* s = new Sampler;
  s->recorder = &recorder;
  s->hz = hz;
  s->credit_per_tick_ns =
      int64_t(environment_count("TRAINSHIM_SAMPLE_BUDGET_US", kDefaultBudgetUs, 1'000'000)) * 1000 / int64_t(hz);
  s->pid = getpid();
  const char* sysfs = std::getenv("TRAINSHIM_SYSFS");
  s->sysfs = sysfs && *sysfs ? sysfs : "/sys";
  while (s->sysfs.size() > 1 && s->sysfs.back() == '/') s->sysfs.pop_back();
  s->environment = environment_facts();
  s->random = (clock_ns(CLOCK_MONOTONIC) ^ (uint64_t(s->pid) << 32)) | 1;
  g_exiting.store(false, std::memory_order_relaxed);
  g_sampler.store(s, std::memory_order_release);
  header->sample_hz.store(hz, std::memory_order_relaxed);
  // The job's signals must never be delivered to the sampler.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  s->program_signals = previous;
  pthread_t thread;
  const bool started = pthread_create(&thread, nullptr, run, s) == 0;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (!started) {
    g_sampler.store(nullptr, std::memory_order_release);
    header->sample_hz.store(0, std::memory_order_relaxed);
    header->sampler.store(uint32_t(SamplerState::Failed), std::memory_order_release);
    say("the sampler's thread could not be started: no thread states or Python stacks are sampled");
    return;
  }
  pthread_detach(thread);
  header->sampler.store(uint32_t(SamplerState::On), std::memory_order_release);
  // At exit the thread stops before its next tick: nothing of the runtime's is called while
  // the process tears it down.
  static std::atomic<bool> exit_handler_installed{false};
  if (!exit_handler_installed.exchange(true)) std::atexit([] { g_exiting.store(true, std::memory_order_release); });
}

void note_fork_in_parent() {
  g_census_after_fork_ns.store(clock_ns(CLOCK_MONOTONIC) + kCensusAfterForkNs, std::memory_order_relaxed);
}

void reset_sampler_after_fork() {
  for (Registered& slot : g_registered) {
    slot.pthread.store(0, std::memory_order_relaxed);
    slot.tid.store(0, std::memory_order_relaxed);
  }
  g_device.store(-1, std::memory_order_relaxed);
  // The parent's sampler object, left as it was at fork(): its files are the parent's threads'.
  if (Sampler* parent = g_sampler.exchange(nullptr, std::memory_order_acq_rel)) {
    forget(parent->main);
    for (TaskFiles& files : parent->threads) forget(files);
  }
}

}  // namespace trainshim::shim
