// `trainshim audit DB [--policy FILE] [--baseline FILE] [--write-baseline FILE]
//                     [--format text|json|junit|markdown] [--step STEP]`
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "diagnose/audit.hpp"
#include "diagnose/load_report.hpp"
#include "render/audit_render.hpp"
#include "store/run_database.hpp"
#include "text/output_text.hpp"

namespace trainshim::cli {

namespace {

struct AuditArguments {
  std::string database, policy, baseline, write_baseline, format, step;
};

nlohmann::json read_baseline(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("{}: cannot read the baseline", path));
  nlohmann::json baseline = nlohmann::json::parse(in, nullptr, false);
  if (!is_baseline(baseline))
    throw UsageError(
        fmt::format("{}: not a trainshim baseline; write one with trainshim audit DB --write-baseline FILE", path));
  return baseline;
}

int audit(const AuditArguments& args) {
  // The policy and the baseline first: a mistake in them is said before a large run is read.
  const auto started = std::chrono::steady_clock::now();
  const Policy policy = args.policy.empty() ? Policy{} : load_policy(args.policy);
  const nlohmann::json baseline = args.baseline.empty() ? nlohmann::json() : read_baseline(args.baseline);
  const RunDatabase db(args.database);
  const Report report = load_report(db, step_name(args.step));
  if (!args.write_baseline.empty()) {
    std::ofstream out(args.write_baseline);
    out << json_text(baseline_of(report)) << "\n";
    if (!out) throw UsageError(fmt::format("{}: cannot write the baseline", args.write_baseline));
    fmt::print("trainshim: baseline of {} written to {}\n", args.database, args.write_baseline);
    return 0;
  }
  AuditResult result = audit(report, policy, args.baseline.empty() ? nullptr : &baseline);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (args.format == "junit") std::cout << render_audit_junit(result);
  else if (args.format == "markdown") std::cout << reader_text(render_audit_markdown(result));
  else if (args.format == "json") std::cout << json_text(render_audit_json(result)) << "\n";
  else std::cout << reader_text(render_audit_text(result));
  return result.passed() ? 0 : 1;
}

}  // namespace

Command add_audit_command(CLI::App& app) {
  auto args = std::make_shared<AuditArguments>();
  CLI::App* command = app.add_subcommand("audit", "check a run against limits and a baseline: exit 0 pass, 1 a "
                                                  "violation, 2 a usage or input error");
  command->add_option("database", args->database, "run database")->required();
  command->add_option("--policy", args->policy, "TOML policy file (limits and allowed sync sites)");
  command->add_option("--baseline", args->baseline,
                      "baseline written by --write-baseline: fail on what is new or worse");
  command->add_option("--write-baseline", args->write_baseline, "write this run as the baseline FILE and exit 0");
  add_format_option(*command, args->format, {"text", "json", "junit", "markdown"});
  add_step_option(*command, args->step);
  return {command, [args] { return audit(*args); }};
}

}  // namespace trainshim::cli
