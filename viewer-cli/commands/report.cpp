// `trainshim report [DB ...] [--format text|json|html] [-o FILE] [--step STEP] [--idle-gap-ms N] [--setup]
//                   [--merge-runs] [--rank N] [--top N] [--summary] [--color WHEN]`
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "commands.hpp"
#include "common.hpp"
#include "diagnose/load_report.hpp"
#include "output_file.hpp"
#include "render/report_json.hpp"
#include "render/report_text.hpp"
#include "store/rows.hpp"
#include "store/run_database.hpp"
#include "text/output_text.hpp"

namespace trainshim::cli {

namespace {

struct ReportArguments {
  std::vector<std::string> databases;
  std::string format, step, output = "-";
  double idle_gap_ms = 0;  // 0: max(1 ms, 5 % of the step)
  bool setup_only = false;
  bool merge_runs = false;
  std::optional<int> rank;
  TextArguments text;
};

int report(ReportArguments args) {
  if (args.databases.empty()) args.databases.push_back(database_argument(""));
  const OpenDatabases databases(args.databases);
  if (!args.merge_runs) check_one_launch(databases.all(), "--merge-runs");
  Report report = load_report(databases.all(), step_name(args.step), int64_t(args.idle_gap_ms * 1e6));
  if (args.rank && !keep_only_rank(report, *args.rank)) {
    std::vector<std::string> ranks;
    for (const ProcessReport& p : report.processes)
      if (p.rank >= 0 && (ranks.empty() || ranks.back() != std::to_string(p.rank)))
        ranks.push_back(std::to_string(p.rank));
    throw UsageError(fmt::format(
        "--rank {}: job {} has no such rank; its ranks: {}", *args.rank, report.job,
        ranks.empty() ? "none (no process was started by a launcher)" : fmt::format("{}", fmt::join(ranks, ", "))));
  }
  if (!args.setup_only) {
    print_report(report, args.format, args.text, args.output);
    return 0;
  }
  if (args.format == "html")
    throw UsageError("--setup prints the checklist as text or JSON; the HTML report (without --setup) holds it too");
  std::string rendered;
  if (args.format == "json") {
    nlohmann::ordered_json doc;
    doc["setup"] = setup_json(report.setup);
    rendered = json_text(doc) + "\n";
  } else {
    const std::string text = render_setup_text(report);
    rendered = terminal_text(text.empty() ? "Setup: no process was checked: no sampler ran in this job "
                                            "(TRAINSHIM_SAMPLE_HZ=0, or a trainshim without one)\n"
                                          : text.substr(1));
  }
  write_output(args.output, "report", [&](std::ostream& out) { out << rendered; });
  return 0;
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto args = std::make_shared<ReportArguments>();
  CLI::App* command = app.add_subcommand("report", "print what a run recorded, per rank");
  command->add_option("databases", args->databases,
                      "run databases, one per node of the job (default: the newest ./trainshim-*.db)");
  add_format_option(*command, args->format, {"text", "json", "html"});
  command->add_option("-o,--output", args->output,
                      "write the report to this file, whole or not at all (default: - for standard output)");
  add_step_option(*command, args->step);
  command
      ->add_option("--idle-gap-ms", args->idle_gap_ms,
                   "the shortest GPU idle gap listed, in milliseconds (default: max(1 ms, 5 % of the step))")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            double ms = 0;
            if (CLI::detail::lexical_cast(text, ms) && std::isfinite(ms) && ms > 0) return {};
            return "a number of milliseconds above 0 (0.5, 2, 20), not " + text;
          },
          "MS>0"));
  command->add_flag("--setup", args->setup_only, "print only the setup checklist (with --json: only \"setup\")");
  command->add_option("--rank", args->rank,
                      "report this rank alone (the job's collective waits, hangs and straggler stay)");
  command->add_flag(
      "--merge-runs", args->merge_runs,
      "merge databases of different runs (of different launches, the same rank in two, or different world sizes) "
      "into one report; "
      "refused without it");
  add_text_options(*command, args->text);
  return {command, [args] { return report(*args); }};
}

}  // namespace trainshim::cli
