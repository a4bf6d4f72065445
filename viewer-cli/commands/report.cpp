// `trainshim report [DB ...] [--format text|json] [--step STEP] [--idle-gap-ms N]`
#include <CLI/CLI.hpp>

#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "run_database.hpp"

namespace trainshim::cli {

namespace {

struct ReportArguments {
  std::vector<std::string> databases;
  std::string format, step;
  double idle_gap_ms = 0;  // 0: max(1 ms, 5 % of the step)
};

int report(ReportArguments args) {
  if (args.databases.empty()) args.databases.push_back(database_argument(""));
  std::vector<std::unique_ptr<RunDatabase>> open;
  std::vector<const RunDatabase*> databases;
  for (const auto& path : args.databases)
    databases.push_back(open.emplace_back(std::make_unique<RunDatabase>(path)).get());
  print_report(load_report(databases, step_name(args.step), int64_t(args.idle_gap_ms * 1e6)), args.format);
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
  return {command, [args] { return report(*args); }};
}

}  // namespace trainshim::cli
