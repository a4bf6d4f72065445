// trainshim: run a job under the shim, and read what it recorded.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>

#include "audit.hpp"
#include "diff.hpp"
#include "export.hpp"
#include "output_text.hpp"
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

int audit_command(const std::string& database, const std::string& policy_file, const std::string& baseline_file,
                  const std::string& write_baseline, const std::string& format) {
  RunDatabase db(database);
  const Report report = load_report(db, step_name(""));
  if (!write_baseline.empty()) {
    std::ofstream out(write_baseline);
    out << json_text(baseline_of(report)) << "\n";
    if (!out) throw UsageError(fmt::format("{}: cannot write the baseline", write_baseline));
    fmt::print("trainshim: baseline of {} written to {}\n", database, write_baseline);
    return 0;
  }
  const Policy policy = policy_file.empty() ? Policy{} : load_policy(policy_file);
  nlohmann::json baseline;
  if (!baseline_file.empty()) {
    std::ifstream in(baseline_file);
    if (!in) throw UsageError(fmt::format("{}: cannot read the baseline", baseline_file));
    baseline = nlohmann::json::parse(in, nullptr, false);
    if (baseline.is_discarded() || !baseline.is_object() || baseline.value("format", "") != "trainshim-baseline/1" ||
        !baseline.contains("sites") || !baseline.contains("ranks"))
      throw UsageError(fmt::format("{}: not a trainshim baseline; write one with trainshim audit DB --write-baseline FILE",
                                   baseline_file));
  }
  const AuditResult result = audit(report, policy, baseline_file.empty() ? nullptr : &baseline);
  if (format == "junit") std::cout << render_audit_junit(result);
  else if (format == "markdown") std::cout << terminal_text(render_audit_markdown(result));
  else if (format == "json") std::cout << json_text(render_audit_json(result)) << "\n";
  else std::cout << terminal_text(render_audit_text(result));
  return result.passed() ? 0 : 1;
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

  std::string audit_db, audit_policy, audit_baseline, audit_write_baseline, audit_format = "text";
  auto* audit_cmd = app.add_subcommand("audit", "check a run against limits and a baseline: exit 0 pass, 1 a "
                                                "violation, 2 a usage or input error");
  audit_cmd->add_option("database", audit_db, "run database")->required();
  audit_cmd->add_option("--policy", audit_policy, "TOML policy file (limits and allowed sync sites)");
  audit_cmd->add_option("--baseline", audit_baseline, "baseline written by --write-baseline: fail on what is new or worse");
  audit_cmd->add_option("--write-baseline", audit_write_baseline, "write this run as the baseline FILE and exit 0");
  audit_cmd->add_option("--format", audit_format, "text, json, junit or markdown")
      ->check(CLI::IsMember({"text", "json", "junit", "markdown"}))
      ->capture_default_str();

  std::string diff_a, diff_b, diff_step;
  bool diff_json = false;
  auto* diff_cmd = app.add_subcommand("diff", "compare two runs (A before, B after) per sync site and per rank");
  diff_cmd->add_option("a", diff_a, "run A (before)")->required();
  diff_cmd->add_option("b", diff_b, "run B (after)")->required();
  diff_cmd->add_flag("--json", diff_json, "print the trainshim-diff/1 JSON document");
  diff_cmd->add_option("--step", diff_step, "what one training step is (default: $TRAINSHIM_STEP, else detected)");

  std::string export_db, export_format = "chrome", export_out;
  auto* export_cmd = app.add_subcommand("export", "write a run as a trace for Perfetto UI or chrome://tracing");
  export_cmd->add_option("database", export_db, "run database (default: the newest ./trainshim-*.db)");
  export_cmd->add_option("--format", export_format, "trace format: chrome")->capture_default_str();
  export_cmd->add_option("-o,--output", export_out, "trace file to write (- for standard output)")->required();

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
      std::cout << (report_json ? json_text(render_json(report)) + "\n" : terminal_text(render_text(report)));
      return 0;
    }
    if (*export_cmd) return export_command(database_argument(export_db), export_format, export_out);
    if (*diff_cmd) {
      const RunDatabase before(diff_a), after(diff_b);
      const RunDiff d = diff_reports(load_report(before, step_name(diff_step)), load_report(after, step_name(diff_step)));
      std::cout << (diff_json ? json_text(render_diff_json(d)) + "\n" : terminal_text(render_diff_text(d)));
      return 0;
    }
    if (*audit_cmd) return audit_command(audit_db, audit_policy, audit_baseline, audit_write_baseline, audit_format);
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
