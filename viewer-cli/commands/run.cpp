// `trainshim run [--out DB] [--format text|json] [--no-report] [--metrics TARGET] [--step STEP]
//                [--top N] [--summary] [--color WHEN] -- CMD ...`
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "diagnose/load_report.hpp"
#include "launch/run_job.hpp"
#include "store/run_database.hpp"

namespace trainshim::cli {

namespace {

struct RunArguments {
  std::string out, format, step, metrics;
  bool no_report = false;
  TextArguments text;
  std::vector<std::string> command;
};

int run(const RunArguments& args) {
  const std::string step = step_name(args.step);
  export_metrics_target(args.metrics);
  const JobRun job = run_job(args.command, args.out);
  if (args.no_report || job.database.empty()) return job.status;
  if (access(job.database.c_str(), R_OK) != 0) {
    fmt::print(stderr, "trainshim: no database was written ({}): nothing was recorded\n", job.database);
    return job.status;
  }
  const RunDatabase db(job.database);
  print_report(load_report(db, step), args.format, args.text);
  return job.status;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArguments>();
  CLI::App* command = app.add_subcommand("run", "run CMD with the shim preloaded, then print the report; "
                                                "exits with CMD's exit status");
  command->add_option("--out", args->out, "database to write (default: $TRAINSHIM_OUT, else ./trainshim-<job>.db)");
  add_format_option(*command, args->format, {"text", "json"});
  command->add_flag("--no-report", args->no_report, "do not print the report");
  add_metrics_option(*command, args->metrics);
  add_step_option(*command, args->step);
  add_text_options(*command, args->text);
  command->add_option("command", args->command, "the command to run, after --")->required();
  return {command, [args] { return run(*args); }};
}

}  // namespace trainshim::cli
