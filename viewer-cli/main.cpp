// trainshim: run a job under the shim, and read what it recorded.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "report.hpp"
#include "run_command.hpp"
#include "run_database.hpp"
#include "trainshim/names.hpp"

using namespace trainshim::cli;

namespace {

std::string database_argument(const std::string& given) {
  if (!given.empty()) return given;
  const std::string found = newest_database(".");
  if (found.empty())
    throw UsageError("no trainshim-*.db in this directory: pass the database (trainshim report PATH.db)");
  return found;
}

std::string step_name(const std::string& given) {
  if (!given.empty()) return given;
  const char* env = std::getenv("TRAINSHIM_STEP");
  return env ? env : "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainshim: why is this CUDA training job slow? Run it under the shim, then read the report."};
  app.require_subcommand(1);

  RunOptions run;
  auto* run_cmd = app.add_subcommand("run", "run CMD with the shim preloaded, then print the report; "
                                            "exits with CMD's exit status");
  run_cmd->add_option("--out", run.out, "database to write (default: $TRAINSHIM_OUT, else ./trainshim-<job>.db)");
  run_cmd->add_flag("--json", run.json, "print the report as JSON");
  bool no_report = false;
  run_cmd->add_flag("--no-report", no_report, "do not print the report");
  run_cmd->add_option("--step", run.step, "what one training step is: a Python function or file:line "
                                           "(default: $TRAINSHIM_STEP, else detected)");
  run_cmd->add_option("command", run.command, "the command to run, after --")->required();

  std::vector<std::string> report_dbs;
  bool report_json = false;
  auto* report_cmd = app.add_subcommand("report", "print what a run recorded, per rank");
  report_cmd->add_option("databases", report_dbs,
                         "run databases, one per node of the job (default: the newest ./trainshim-*.db)");
  report_cmd->add_flag("--json", report_json, "print the trainshim-report/1 JSON document");
  std::string report_step;
  report_cmd->add_option("--step", report_step, "what one training step is: a Python function or file:line "
                                                "(default: $TRAINSHIM_STEP, else detected)");

  std::string collect_job, collect_out;
  double collect_idle = 2;
  auto* collect_cmd = app.add_subcommand("collect", "drain a job's segments left in shared memory by a run "
                                                    "whose collector could not start");
  collect_cmd->add_option("--job", collect_job, "job id (default: from the environment, as the shim derives it)");
  collect_cmd->add_option("--out", collect_out, "database (default: $TRAINSHIM_OUT, else ./trainshim-<job>.db)");
  collect_cmd->add_option("--idle-exit", collect_idle, "seconds to wait for new segments before exiting")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    if (*run_cmd) {
      run.report = !no_report;
      run.step = step_name(run.step);
      return run_command(run);
    }
    if (*report_cmd) {
      if (report_dbs.empty()) report_dbs.push_back(database_argument(""));
      std::vector<std::unique_ptr<RunDatabase>> dbs;
      std::vector<const RunDatabase*> views;
      for (const auto& path : report_dbs) views.push_back(dbs.emplace_back(std::make_unique<RunDatabase>(path)).get());
      const Report report = load_report(views, step_name(report_step));
      std::cout << (report_json ? render_json(report).dump(2) + "\n" : render_text(report));
      return 0;
    }
    if (*collect_cmd) {
      const std::string job = trainshim::sanitize_job(collect_job.empty() ? trainshim::job_from_environment() : collect_job);
      return collect_command(job, collect_out, collect_idle);
    }
  } catch (const UsageError& e) {
    fmt::print(stderr, "trainshim: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "trainshim: {}\n", e.what());
    return 1;
  }
  return 2;
}
