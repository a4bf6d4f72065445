// trainshim-collector: drains one job's shared-memory segments on this node into its database.
// Normally started for you (by the shim on the job's first CUDA call, or by `trainshim run`).
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdlib>
#include <fmt/format.h>

#include "collector.hpp"
#include "trainshim/collector_launch.hpp"
#include "trainshim/names.hpp"

namespace {

std::atomic<bool> g_stop{false};

void request_stop(int) { g_stop.store(true); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainshim-collector: drains a job's trainshim segments into its SQLite database"};
  std::string job;
  std::string out;
  int lock_fd = -1;
  double idle_exit_seconds = 0;
  int poll_ms = 50;
  app.add_option("--job", job, "job id (default: as the shim derives it from the environment)");
  app.add_option("--out", out, "database path (default: $TRAINSHIM_OUT, else ./trainshim-<job>.db)");
  app.add_option("--lock-fd", lock_fd, "descriptor of the job's lock, already held (set by whoever starts the collector)");
  app.add_option("--exit-when-idle", idle_exit_seconds,
                 "exit once every producer is gone and none appeared for this many seconds")
      ->expected(0, 1)
      ->default_str("10");
  app.add_option("--poll-ms", poll_ms, "pause between passes when there is nothing to read")->check(CLI::Range(1, 10000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (app.count("--exit-when-idle") && idle_exit_seconds == 0) idle_exit_seconds = 10;

  if (job.empty()) job = trainshim::job_from_environment();
  job = trainshim::sanitize_job(job);
  if (out.empty()) {
    const char* env = std::getenv("TRAINSHIM_OUT");
    out = env && *env ? env : fmt::format("trainshim-{}.db", job);
  }
  std::chrono::milliseconds hang{120'000};
  if (const char* value = std::getenv("TRAINSHIM_HANG_S"); value && *value) {
    char* end = nullptr;
    const double seconds = std::strtod(value, &end);
    if (*end != '\0' || seconds <= 0) {
      fmt::print(stderr, "trainshim-collector: TRAINSHIM_HANG_S={} is not a number of seconds above 0\n", value);
      return 2;
    }
    hang = std::chrono::milliseconds(int64_t(seconds * 1000));
  }
  const std::string lock_path = trainshim::collector_lock_path(getuid(), job);
  if (lock_fd < 0) {
    lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      fmt::print(stderr, "trainshim-collector: a collector for job {} already runs on this node (lock {})\n", job, lock_path);
      return 1;
    }
  }
  // The lock file is removed when a collector exits; a lock taken on a file that was removed
  // meanwhile guards nothing, and another collector may hold the new one.
  struct stat held {}, current {};
  if (fstat(lock_fd, &held) != 0 || stat(lock_path.c_str(), &current) != 0 || held.st_ino != current.st_ino) {
    fmt::print(stderr, "trainshim-collector: the lock {} was replaced: another collector runs for job {}\n", lock_path, job);
    return 1;
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
    if (!app.count("--out")) options.launch = trainshim::launch_from_environment();
    options.database_path = trainshim::collector::database_path_for_launch(out, options.launch);
    if (options.database_path != out)
      fmt::print(stderr, "trainshim-collector: {} holds another launch of job {}: this launch is written to {}\n", out,
                 job, options.database_path);
    options.uid = getuid();
    options.poll = std::chrono::milliseconds(poll_ms);
    options.idle_exit = std::chrono::milliseconds(int64_t(idle_exit_seconds * 1000));
    options.hang = hang;
    trainshim::collector::Collector collector(options);
    collector.run(g_stop);
  } catch (const std::exception& e) {
    unlink(lock_path.c_str());
    fmt::print(stderr, "trainshim-collector: {}\n", e.what());
    return 1;
  }
  unlink(lock_path.c_str());
  return 0;
}
