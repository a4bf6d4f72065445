// trainshim-collector: drains one job's shared-memory segments on this node into its database.
// Normally started for you (by the shim on the job's first CUDA call, or by `trainshim run`).
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <vector>

#include "collector.hpp"
#include "metrics_exporter.hpp"
#include "trainshim/collector_lock.hpp"
#include "trainshim/names.hpp"

namespace {

std::atomic<bool> g_stop{false};

void request_stop(int) { g_stop.store(true); }

void redirect_to_null(int fd) {
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) return;
  if (null != fd) {
    dup2(null, fd);
    close(null);
  }
}

// The starter's descriptors (its pipes, its lock files, its sockets) must not stay open for as
// long as the collector lives: whoever reads the pipe, or waits for the lock, would wait for us.
void close_inherited_descriptors(int keep) {
  redirect_to_null(STDIN_FILENO);
  redirect_to_null(STDOUT_FILENO);
  const unsigned first = 3;
  bool closed = keep < int(first) ? close_range(first, ~0U, 0) == 0
                                  : (keep == int(first) || close_range(first, unsigned(keep) - 1, 0) == 0) &&
                                        close_range(unsigned(keep) + 1, ~0U, 0) == 0;
  if (closed) return;
  // Kernels before 5.9 have no close_range.
  std::vector<int> open_fds;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir)) {
      const int fd = std::atoi(entry->d_name);
      if (entry->d_name[0] != '.' && fd >= int(first) && fd != keep && fd != dirfd(dir)) open_fds.push_back(fd);
    }
    closedir(dir);
  }
  for (int fd : open_fds) close(fd);
}

// Started by a rank pinned to its cores (taskset, numactl, Slurm's --cpu-bind), the node's one
// collector, which drains every rank, would run on that rank's cores and compete with it: it runs
// on every CPU it may use (the kernel keeps the mask within the cgroup's cpuset). Its nice value
// stays the starter's: a job started niced is drained niced.
void spread_over_allowed_cpus() {
  cpu_set_t every;
  CPU_ZERO(&every);
  const long configured = sysconf(_SC_NPROCESSORS_CONF);
  for (long cpu = 0; cpu < configured && cpu < CPU_SETSIZE; ++cpu) CPU_SET(int(cpu), &every);
  sched_setaffinity(0, sizeof every, &every);
}

// Removes the lock file while still holding it, then lets go: whoever waits on the old file
// sees it was removed (collector_lock.hpp) and takes a new one. Only once: after the release
// the name may be another collector's.
void release_lock(int& lock_fd, const std::string& lock_path) {
  if (lock_fd < 0) return;
  unlink(lock_path.c_str());
  close(lock_fd);
  lock_fd = -1;
}

bool unseen_segment(const std::string& job, const std::set<std::string>& listed) {
  for (const std::string& name : trainshim::collector::list_segments(getuid(), job))
    if (!listed.count(name)) return true;
  return false;
}

// A count from the environment variable `name`, or `fallback` when it is unset or empty; nullopt
// (said on standard error) when it is not a whole number from 0 to `most`.
std::optional<int64_t> count_from_environment(const char* name, int64_t fallback, int64_t most, const char* what) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value, &end, 10);
  if (*end != '\0' || errno != 0 || n < 0 || n > most) {
    fmt::print(stderr, "trainshim-collector: {}={} is not a number of {} from 0 to {}\n", name, value, what, most);
    return std::nullopt;
  }
  return n;
}

// Seconds from the environment variable `name`, or `fallback` when it is unset or empty; nullopt
// (said on standard error) when it is not a number above 0 and at most `most`. NaN and infinity
// pass a plain comparison: only finite values are taken.
std::optional<double> seconds_from_environment(const char* name, double fallback, double most) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(value, &end);
  if (*end != '\0' || !(seconds > 0 && seconds <= most)) {
    fmt::print(stderr, "trainshim-collector: {}={} is not a number of seconds above 0 and at most {}\n", name, value,
               most);
    return std::nullopt;
  }
  return seconds;
}

}  // namespace

// Each kept event takes about 110 bytes of the collector's memory per process.
constexpr int64_t kMostRecentEvents = 1'000'000;
// About 60 GB of database per process: far past what a report reads.
constexpr int64_t kMostGpuRows = 1'000'000'000;
// About 40 GB of database per process.
constexpr int64_t kMostSampleRows = 1'000'000'000;

int main(int argc, char** argv) {
  CLI::App app{"trainshim-collector: drains a job's trainshim segments into its SQLite database"};
  std::string job;
  std::string out;
  int lock_fd = -1;
  double idle_exit_seconds = 0;
  int poll_ms = 50;
  app.add_option("--job", job, "job id (default: as the shim derives it from the environment)");
  app.add_option("--out", out, "database path (default: $TRAINSHIM_OUT, else ./trainshim-<job>.db)");
  app.add_option("--lock-fd", lock_fd,
                 "descriptor of the job's lock, already held (set by whoever starts the collector)");
  bool daemonize = false;
  bool exit_when_orphaned = false;
  app.add_flag("--exit-when-orphaned", exit_when_orphaned,
               "once the process that started this collector is gone (killed), exit as with --exit-when-idle "
               "(10 s unless given); set by trainshim run, which otherwise stops it after the job");
  // No default_str: CLI11 would give it to the flag without a value, which must mean "from the
  // environment".
  app.add_option("--exit-when-idle", idle_exit_seconds,
                 "exit once every producer is gone and none appeared for this many seconds (no value, or 0: "
                 "$TRAINSHIM_COLLECTOR_IDLE_S, else 10)")
      ->expected(0, 1);
  int64_t recent_events = -1;
  app.add_option("--recent-events", recent_events,
                 "most recent copies without stacks and polls kept per process for the timeline (default: "
                 "$TRAINSHIM_RECENT_EVENTS, else 20000; 0: none)")
      ->check(CLI::Range(int64_t{0}, kMostRecentEvents));
  int64_t gpu_rows = -1;
  app.add_option("--gpu-rows", gpu_rows,
                 "most GPU activity records kept per process for the GPU timeline, the first ones (default: "
                 "$TRAINSHIM_GPU_ROWS, else 2000000; 0: none); the rest are counted")
      ->check(CLI::Range(int64_t{0}, kMostGpuRows));
  int64_t sample_rows = -1;
  app.add_option("--sample-rows", sample_rows,
                 "most samples of the sampler thread kept per process, the first ones (default: "
                 "$TRAINSHIM_SAMPLE_ROWS, else 1000000; 0: none); the rest are counted")
      ->check(CLI::Range(int64_t{0}, kMostSampleRows));
  app.add_option("--poll-ms", poll_ms,
                 "how often new segments are looked for, and the longest pause between passes while none is open")
      ->check(CLI::Range(1, 10000));
  app.add_flag("--daemonize", daemonize,
               "fork at once and exit, the collector carrying on in its own session (so that it is never a child "
               "of the process that started it)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!std::isfinite(idle_exit_seconds) || idle_exit_seconds < 0) {
    fmt::print(stderr, "trainshim-collector: --exit-when-idle {} is not a number of seconds of 0 or more\n",
               idle_exit_seconds);
    return 2;
  }

  // Before --daemonize makes this process another's child.
  const pid_t starter = getppid();
  close_inherited_descriptors(lock_fd);
  if (daemonize) {
    const pid_t child = fork();
    if (child < 0) {
      fmt::print(stderr, "trainshim-collector: cannot fork: {}\n", std::strerror(errno));
      return 1;
    }
    if (child > 0) _exit(0);
    setsid();
  }
  spread_over_allowed_cpus();

  if (job.empty()) job = trainshim::job_from_environment();
  job = trainshim::sanitize_job(job);
  if (out.empty()) out = trainshim::default_database(job);
  // A lock taken for this collector by whoever started it (--lock-fd) is removed as it goes, as an
  // exit removes it: the job's files are not left in /dev/shm.
  const auto refuse = [&] {
    if (lock_fd >= 0) release_lock(lock_fd, trainshim::held_lock_path(lock_fd, getuid(), job));
    return 2;
  };
  constexpr double kLongestHangSeconds = 7 * 24 * 3600;
  const auto hang_seconds = seconds_from_environment("TRAINSHIM_HANG_S", 120, kLongestHangSeconds);
  if (!hang_seconds) return refuse();
  const std::chrono::milliseconds hang{int64_t(*hang_seconds * 1000)};
  // --exit-when-idle without a value (the shim's on-demand collector): how long a job whose
  // processes are all gone may take to start the next (an elastic restart) and keep this database.
  if (app.count("--exit-when-idle") && idle_exit_seconds == 0) {
    constexpr double kLongestIdleSeconds = 24 * 3600;
    const auto idle = seconds_from_environment("TRAINSHIM_COLLECTOR_IDLE_S", 10, kLongestIdleSeconds);
    if (!idle) return refuse();
    idle_exit_seconds = *idle;
  }
  int64_t test_clock_offset_ns = 0;
  if (const char* value = std::getenv("TRAINSHIM_TEST_CLOCK_OFFSET_NS"); value && *value) {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(value, &end, 10);
    constexpr long long kLargestOffsetNs = 3'600'000'000'000;  // an hour
    if (*end != '\0' || errno != 0 || n < -kLargestOffsetNs || n > kLargestOffsetNs) {
      fmt::print(stderr,
                 "trainshim-collector: TRAINSHIM_TEST_CLOCK_OFFSET_NS={} is not a number of nanoseconds "
                 "within an hour either way\n",
                 value);
      return refuse();
    }
    test_clock_offset_ns = n;
  }
  if (recent_events < 0) {
    const auto n = count_from_environment("TRAINSHIM_RECENT_EVENTS", trainshim::collector::kDefaultRecentEvents,
                                          kMostRecentEvents, "events");
    if (!n) return refuse();
    recent_events = *n;
  }
  if (gpu_rows < 0) {
    const auto n = count_from_environment("TRAINSHIM_GPU_ROWS", int64_t(trainshim::collector::kDefaultGpuRows),
                                          kMostGpuRows, "rows");
    if (!n) return refuse();
    gpu_rows = *n;
  }
  if (sample_rows < 0) {
    const auto n = count_from_environment("TRAINSHIM_SAMPLE_ROWS", int64_t(trainshim::collector::kDefaultSampleRows),
                                          kMostSampleRows, "rows");
    if (!n) return refuse();
    sample_rows = *n;
  }
  std::string lock_path;
  std::vector<trainshim::RefusedLockFile> refused;
  if (lock_fd < 0) {
    trainshim::CollectorLock lock = trainshim::acquire_collector_lock(getuid(), job);
    using Outcome = trainshim::CollectorLock::Outcome;
    if (lock.outcome == Outcome::Held) {
      fmt::print(stderr, "trainshim-collector: a collector for job {} already runs on this node\n", job);
      return 1;
    }
    if (lock.outcome != Outcome::Acquired) {
      const std::string why =
          lock.outcome == Outcome::NoUsableFile ? trainshim::no_usable_lock_message(job) : lock.error;
      fmt::print(stderr, "trainshim-collector: {}\n", why);
      return 1;
    }
    lock_fd = lock.fd;
    lock_path = lock.path;
    refused = lock.refused;
  } else {
    // The lock file is removed when a collector exits; a lock taken on a file that was removed
    // meanwhile guards nothing, and another collector may hold the new one.
    lock_path = trainshim::held_lock_path(lock_fd, getuid(), job);
    if (lock_path.empty()) {
      fmt::print(stderr, "trainshim-collector: the lock of job {} was replaced: another collector runs for it\n", job);
      return 1;
    }
    refused = trainshim::lock_files_passed_over(getuid(), job, lock_path);
  }

  // Symbols come from the files on this node; a debuginfod lookup over the network could stall
  // the drain for minutes.
  unsetenv("DEBUGINFOD_URLS");

  struct sigaction action {};
  action.sa_handler = request_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  sigset_t termination;
  sigemptyset(&termination);
  sigaddset(&termination, SIGTERM);
  sigaddset(&termination, SIGINT);
  sigprocmask(SIG_UNBLOCK, &termination, nullptr);

  try {
    trainshim::collector::CollectorOptions options;
    options.job = job;
    // Whoever passes --out (trainshim run, trainshim collect) reads that very file back.
    const bool named = app.count("--out") > 0;
    if (!named) options.launch = trainshim::launch_from_environment();
    options.database_path = named ? out : trainshim::collector::database_path_for_launch(out, options.launch);
    if (options.database_path != out)
      fmt::print(stderr,
                 "trainshim-collector: {} holds another launch of job {}, or an earlier trainshim's database: this "
                 "launch is written to {}\n",
                 out, job, options.database_path);
    options.uid = getuid();
    options.poll = std::chrono::milliseconds(poll_ms);
    options.idle_exit = std::chrono::milliseconds(int64_t(idle_exit_seconds * 1000));
    if (exit_when_orphaned) options.starter = starter;
    options.hang = hang;
    options.recent_events = uint32_t(recent_events);
    options.gpu_rows = uint64_t(gpu_rows);
    options.sample_rows = uint64_t(sample_rows);
    options.test_clock_offset_ns = test_clock_offset_ns;
    if (const char* metrics = std::getenv("TRAINSHIM_METRICS"); metrics && *metrics)
      options.metrics_exporter = trainshim::collector::exporter_program();
    std::optional<trainshim::collector::Collector> collector(std::in_place, options);
    std::error_code no_cwd;
    const std::string database = std::filesystem::absolute(options.database_path, no_cwd).lexically_normal();
    trainshim::write_lock_database(lock_fd, database);
    if (!refused.empty()) collector->report("warning", trainshim::describe_refused(refused));
    // Started by a job, standard error is the job's, maybe a pipe its caller reads to the end:
    // it served for start-up failures; from here on the database's log has every message.
    if (daemonize && !isatty(STDERR_FILENO)) redirect_to_null(STDERR_FILENO);
    for (;;) {
      collector->run(g_stop);
      // The last pass found a producer that started as this collector was going: it stays.
      if (!g_stop.load() && collector->live_segments() > 0) continue;
      const std::set<std::string> listed = collector->listed();
      // The database is closed before the lock goes: whoever waits for that finds it complete.
      collector.reset();
      release_lock(lock_fd, lock_path);
      if (g_stop.load() || !unseen_segment(job, listed)) break;
      // A producer that started before the lock was released saw it held and started no
      // collector: this one carries on, unless another has taken the lock since (it drains all).
      trainshim::CollectorLock again = trainshim::acquire_collector_lock(getuid(), job);
      if (again.outcome != trainshim::CollectorLock::Outcome::Acquired) break;
      lock_fd = again.fd;
      lock_path = again.path;
      collector.emplace(options);
      trainshim::write_lock_database(lock_fd, database);
    }
  } catch (const std::exception& e) {
    release_lock(lock_fd, lock_path);
    fmt::print(stderr, "trainshim-collector: {}\n", e.what());
    return 1;
  }
  return 0;
}
