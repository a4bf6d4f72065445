#include "launch/run_job.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include "errors.hpp"
#include "store/run_database.hpp"
#include "text/output_text.hpp"
#include "trainshim/collector_launch.hpp"
#include "trainshim/names.hpp"

namespace trainshim::cli {

namespace {

// The signals a scheduler or a supervisor sends to stop or warn the process it started: trainshim
// run passes them on to the job, as a launcher does (Slurm's scancel and --signal, Kubernetes'
// SIGTERM to the container's first process, which may be trainshim), and stays to collect and report.
constexpr int kForwardedSignals[] = {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

std::atomic<pid_t> g_job_pid{0};
volatile sig_atomic_t g_pending_signal = 0;  // one that came before the job was started

void forward_to_job(int signal) {
  const pid_t job = g_job_pid.load(std::memory_order_relaxed);
  if (job > 0) kill(job, signal);
  else g_pending_signal = signal;
}

void set_forwarding(bool on) {
  struct sigaction action {};
  action.sa_handler = on ? forward_to_job : SIG_DFL;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (const int signal : kForwardedSignals) sigaction(signal, &action, nullptr);
}

int wait_status(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// The collector's exit status. It drains the job's last records and symbolizes their stacks, which
// can take seconds: on a terminal, stderr says so and counts them, and the line is cleared at the end.
int wait_for_collector(pid_t collector, const std::string& database) {
  if (!isatty(STDERR_FILENO)) return wait_status(collector);
  constexpr auto kPoll = std::chrono::milliseconds(100);
  constexpr int kQuietPolls = 10;  // a collector done within a second needs no word
  bool shown = false;
  for (int polls = 0;; ++polls) {
    int status = 0;
    const pid_t done = waitpid(collector, &status, WNOHANG);
    if (done == collector || (done < 0 && errno != EINTR)) {
      if (shown) fmt::print(stderr, "\r\x1b[K");
      if (done < 0) return 127;
      return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
    }
    if (polls >= kQuietPolls && polls % kQuietPolls == 0) {
      fmt::print(stderr, "\rtrainshim: writing {}: the collector stores the job's last records ({} s)",
                 terminal_text(database), polls / kQuietPolls);
      std::fflush(stderr);
      shown = true;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

bool holds_no_process(const std::string& path) {
  try {
    return !holds_a_process(RunDatabase(path));
  } catch (const std::exception&) {
    return false;  // unreadable: left for the user to look at
  }
}

}  // namespace

std::string own_directory() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

std::string collector_executable() {
  if (const char* path = std::getenv("TRAINSHIM_COLLECTOR"); path && *path) return path;
  return own_directory() + "/trainshim-collector";
}

bool job_has_segment(uid_t uid, const std::string& job) {
  const std::string prefix = segment_prefix(uid, job);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(kShmDir), ec))
    if (entry.path().filename().string().starts_with(prefix)) return true;
  return false;
}

std::string absolute_path(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}

JobRun run_job(const std::vector<std::string>& command, const std::string& database) {
  const char* job_env = std::getenv("TRAINSHIM_JOB");
  const std::string job =
      sanitize_job(job_env && *job_env ? std::string(job_env) : fmt::format("run_{}_{}", getpid(), std::time(nullptr)));
  const std::string out = absolute_path(database.empty() ? default_database(job) : database);
  const std::string shim = own_directory() + "/libtrainshim.so";
  if (access(shim.c_str(), R_OK) != 0)
    throw UsageError(fmt::format("{} not found: trainshim run expects the shim beside the trainshim executable", shim));

  setenv("TRAINSHIM_JOB", job.c_str(), 1);
  setenv("TRAINSHIM_OUT", out.c_str(), 1);
  // A database this run creates and leaves without a process is removed: the command made no CUDA
  // call (a typo, a launcher that failed), and an empty file would only be mistaken for a run.
  const bool existed = access(out.c_str(), F_OK) == 0;

  // The terminal's Ctrl-C reaches the job itself, as without trainshim; trainshim stays to collect
  // and report once the job has exited. SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 sent to trainshim are
  // passed on to the job. The collector runs in a session of its own: it is
  // stopped by trainshim alone, after the job, so that everything the job recorded is drained;
  // should trainshim be killed, it exits once idle with no producer left (--exit-when-orphaned).
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  set_forwarding(true);
  const Launch launched =
      launch_collector(collector_executable(), getuid(), job, {"--job", job, "--out", out, "--exit-when-orphaned"},
                       CollectorParent::Starter);
  if (!launched.refused.empty()) fmt::print(stderr, "trainshim: {}\n", describe_refused(launched.refused));
  if (launched.result == LaunchResult::Failed || launched.result == LaunchResult::NoLockFile)
    fmt::print(stderr,
               "trainshim: could not start the collector ({}): the job runs, its events wait in shared memory "
               "(`trainshim collect --job {}` drains them)\n",
               launched.problem, job);
  if (launched.result == LaunchResult::AlreadyRunning)
    fmt::print(stderr, "trainshim: a collector for job {} already runs; it writes its own database\n", job);

  const char* preload = std::getenv("LD_PRELOAD");
  const std::string preload_value = preload && *preload ? shim + ":" + preload : shim;
  setenv("LD_PRELOAD", preload_value.c_str(), 1);

  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGQUIT);
  for (const int signal : kForwardedSignals) sigaddset(&defaults, signal);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t child = -1;
  const int rc = posix_spawnp(&child, argv[0], nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  unsetenv("LD_PRELOAD");
  int status = 127;
  if (rc != 0) {
    fmt::print(stderr, "trainshim: cannot run {}: {}\n", command[0], std::strerror(rc));
  } else {
    g_job_pid.store(child, std::memory_order_relaxed);
    if (const int pending = g_pending_signal) kill(child, pending);
    status = wait_status(child);
  }
  // The job is gone: a second signal (a scheduler's grace period running out) stops trainshim itself;
  // its collector, orphaned, still drains and exits.
  g_job_pid.store(0, std::memory_order_relaxed);
  set_forwarding(false);
  if (launched.result == LaunchResult::Started) {
    kill(launched.pid, SIGTERM);
    const int collector_status = wait_for_collector(launched.pid, out);
    if (collector_status != 0) fmt::print(stderr, "trainshim: the collector exited with status {}\n", collector_status);
    if (collector_status == 0 && !existed && holds_no_process(out)) {
      unlink(out.c_str());
      fmt::print(stderr, "trainshim: {} made no CUDA call: nothing was recorded, no database was written\n",
                 command[0]);
      return {status, ""};
    }
  }
  return {status, out};
}

}  // namespace trainshim::cli
