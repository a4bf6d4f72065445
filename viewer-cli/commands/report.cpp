// `trainshim report [DB ...] [--format text|json] [--step STEP] [--idle-gap-ms N] [--setup]`
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "output_text.hpp"
#include "report_json.hpp"
#include "report_text.hpp"
#include "run_database.hpp"

namespace trainshim::cli {

namespace {

struct ReportArguments {
  std::vector<std::string> databases;
  std::string format, step;
  double idle_gap_ms = 0;  // 0: max(1 ms, 5 % of the step)
  bool setup_only = false;
};

int report(ReportArguments args) {
  if (args.databases.empty()) args.databases.push_back(database_argument(""));
  std::vector<std::unique_ptr<RunDatabase>> open;
  std::vector<const RunDatabase*> databases;
  for (const auto& path : args.databases)
    databases.push_back(open.emplace_back(std::make_unique<RunDatabase>(path)).get());
  const Report report = load_report(databases, step_name(args.step), int64_t(args.idle_gap_ms * 1e6));
  if (!args.setup_only) {
    print_report(report, args.format);
    return 0;
  }
  if (args.format == "json") {
    nlohmann::ordered_json doc;
    doc["setup"] = setup_json(report.setup);
    std::cout << json_text(doc) << "\n";
  } else {
    const std::string text = render_setup_text(report);
    std::cout << terminal_text(text.empty() ? "Setup: no process was checked: no sampler ran in this job "
                                              "(TRAINSHIM_SAMPLE_HZ=0, or a trainshim without one)\n"
                                            : text.substr(1));
  }
  return 0;
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto args = std::make_shared<ReportArguments>();
  CLI::App* command = app.add_subcommand("report", "print what a run recorded, per rank");
  command->add_option("databases", args->databases,
                      "run databases, one per node of the job (default: the newest ./trainshim-*.db)");
  add_format_option(*command, args->format, {"text", "json"});
  add_step_option(*command, args->step);
  command
      ->add_option("--idle-gap-ms", args->idle_gap_ms,
                   "the shortest GPU idle gap listed, in milliseconds (default: max(1 ms, 5 % of the step))")
      ->check(CLI::PositiveNumber);
  command->add_flag("--setup", args->setup_only, "print only the setup checklist (with --json: only \"setup\")");
  return {command, [args] { return report(*args); }};
}

}  // namespace trainshim::cli
