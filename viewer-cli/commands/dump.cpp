// `trainshim dump [--job JOB] [DB] [--format text|json]`
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "store/dump.hpp"
#include "store/run_database.hpp"
#include "text/output_text.hpp"
#include "trainshim/collector_lock.hpp"

namespace trainshim::cli {

namespace {

// A latest sample older than this, of a process that has not ended: the collector is not storing
// what the sampler writes (it stopped, or it cannot keep up).
constexpr int64_t kStaleNs = 5'000'000'000;

struct DumpArguments {
  std::string database, job, format;
};

// The database the collector of `job` writes: the one its lock file names while it runs (wherever
// --out or TRAINSHIM_OUT put it); else $TRAINSHIM_OUT, else ./trainshim-<job>.db, where a later
// launch of the same job that found it taken writes <stem>.2.db, <stem>.3.db, ...: the newest.
std::string job_database(const std::string& job) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const std::string running = running_collector_database(getuid(), sanitize_job(job));
      !running.empty() && fs::is_regular_file(running, ec))
    return running;
  const char* out = std::getenv("TRAINSHIM_OUT");
  const std::string base = out && *out ? out : "./trainshim-" + job + ".db";
  const std::string stem = base.ends_with(".db") ? base.substr(0, base.size() - 3) : base;
  std::string best;
  fs::file_time_type best_time{};
  for (int n = 1; n < 100; ++n) {
    const std::string path = n == 1 ? base : fmt::format("{}.{}.db", stem, n);
    if (!fs::is_regular_file(path, ec)) {
      if (n > 1) break;
      continue;
    }
    const auto t = fs::last_write_time(path, ec);
    if (best.empty() || t > best_time) {
      best = path;
      best_time = t;
    }
  }
  if (best.empty())
    throw UsageError(fmt::format("no database of job {} at {}: pass the database (trainshim dump PATH.db), or run "
                                 "where the job was started",
                                 job, base));
  return best;
}

int dump(const DumpArguments& args) {
  const std::string path = !args.database.empty() ? args.database
                           : !args.job.empty()    ? job_database(args.job)
                                                  : database_argument("");
  const RunDatabase db(path);
  if (!args.job.empty() && db.meta("job") != args.job)
    throw UsageError(fmt::format("{} holds job {}, not {}: pass the job's database", path, db.meta("job"), args.job));
  const std::vector<DumpProcess> processes = load_dump(db);
  if (processes.empty() && !holds_a_process(db))
    throw UsageError(fmt::format("{}: no process of job {} stored yet: the collector stores each process at its first "
                                 "CUDA call; try again in a second",
                                 path, db.meta("job")));
  if (processes.empty())
    throw UsageError(fmt::format("{}: no running process: every process of job {} has ended (trainshim report {} "
                                 "shows what they did)",
                                 path, db.meta("job"), path));
  bool sampled = false;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const DumpProcess& p : processes) {
    if (p.threads.empty()) continue;
    sampled = true;
    if (now - p.latest_unix_ns > kStaleNs)
      fmt::print(stderr,
                 "trainshim: rank {} (pid {}): the collector has not stored a sample for {} s: what follows may be "
                 "stale; is trainshim-collector still running?\n",
                 p.rank < 0 ? std::string("?") : std::to_string(p.rank), p.pid,
                 (now - p.latest_unix_ns) / 1'000'000'000);
  }
  if (!sampled)
    throw UsageError(fmt::format("{}: no sample of a running process: their sampler is off (TRAINSHIM_SAMPLE_HZ=0) "
                                 "or the collector has stored none yet; try again in a second",
                                 path));
  std::cout << (args.format == "json" ? json_text(render_dump_json(processes)) + "\n"
                                      : reader_text(render_dump_text(processes)));
  return 0;
}

}  // namespace

Command add_dump_command(CLI::App& app) {
  auto args = std::make_shared<DumpArguments>();
  CLI::App* command =
      app.add_subcommand("dump", "print what every thread of a running job is doing now, with its Python stack");
  command->add_option("database", args->database,
                      "run database (default: the job's, with --job; else the newest ./trainshim-*.db)");
  command->add_option("--job", args->job, "the job whose database to read ($TRAINSHIM_OUT, else ./trainshim-JOB.db)");
  add_format_option(*command, args->format, {"text", "json"});
  return {command, [args] { return dump(*args); }};
}

}  // namespace trainshim::cli
