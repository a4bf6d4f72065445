// `trainshim collect [--job JOB] [--out DB] [--idle-exit SECONDS] [--metrics TARGET]`: the collector
// in the foreground, for segments a run left in shared memory when its collector could not start.
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "commands.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "launch/run_job.hpp"
#include "trainshim/collector_lock.hpp"
#include "trainshim/names.hpp"

namespace trainshim::cli {

namespace {

struct CollectArguments {
  std::string job, out, metrics;
  double idle_exit_seconds = 2;
};

int collect(const CollectArguments& args) {
  const std::string job = sanitize_job(args.job.empty() ? job_from_environment() : args.job);
  const double idle = args.idle_exit_seconds;
  if (!std::isfinite(idle) || idle <= 0)
    throw UsageError(fmt::format("--idle-exit {}: give a number of seconds above 0", idle));
  export_metrics_target(args.metrics);
  // Waits as the collector would for a first segment, but writes no empty database for a job id
  // that matches nothing (a mistyped id, another user's job).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(idle);
  while (!job_has_segment(getuid(), job)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      // A collector killed after it drained everything left only its lock file.
      remove_abandoned_collector_lock(getuid(), job);
      fmt::print(stderr,
                 "trainshim: no segment of job {} was found in {} (waited {} s): nothing to collect, no "
                 "database written. Segments are named {}<pid>; check the job id (--job, else "
                 "TRAINSHIM_JOB, torchrun's run id, Slurm's job id, else the process group)\n",
                 job, kShmDir, idle, segment_prefix(getuid(), job));
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<std::string> collector_args{"--job", job, "--exit-when-idle", fmt::format("{}", idle)};
  if (!args.out.empty()) collector_args.insert(collector_args.end(), {"--out", absolute_path(args.out)});
  std::vector<char*> argv{const_cast<char*>("trainshim-collector")};
  for (auto& a : collector_args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string path = collector_executable();
  execv(path.c_str(), argv.data());
  throw UsageError(fmt::format("cannot run {}: {}", path, std::strerror(errno)));
}

}  // namespace

Command add_collect_command(CLI::App& app) {
  auto args = std::make_shared<CollectArguments>();
  CLI::App* command = app.add_subcommand("collect", "drain a job's segments left in shared memory by a run "
                                                    "whose collector could not start");
  command->add_option("--job", args->job, "job id (default: from the environment, as the shim derives it)");
  command->add_option("--out", args->out, "database (default: $TRAINSHIM_OUT, else ./trainshim-<job>.db)");
  command->add_option("--idle-exit", args->idle_exit_seconds, "seconds to wait for new segments before exiting")
      ->capture_default_str();
  add_metrics_option(*command, args->metrics);
  return {command, [args] { return collect(*args); }};
}

}  // namespace trainshim::cli
