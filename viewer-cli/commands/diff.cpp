// `trainshim diff A.db B.db [--format text|json] [--step STEP]`
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "diagnose/load_report.hpp"
#include "render/diff_render.hpp"
#include "store/run_database.hpp"
#include "text/output_text.hpp"

namespace trainshim::cli {

namespace {

struct DiffArguments {
  std::string a, b, format, step;
};

int diff(const DiffArguments& args) {
  const RunDatabase before(args.a), after(args.b);
  const std::string step = step_name(args.step);
  const RunDiff d = diff_reports(load_report(before, step), load_report(after, step));
  std::cout << (args.format == "json" ? json_text(render_diff_json(d)) + "\n" : reader_text(render_diff_text(d)));
  return 0;
}

}  // namespace

Command add_diff_command(CLI::App& app) {
  auto args = std::make_shared<DiffArguments>();
  CLI::App* command = app.add_subcommand("diff", "compare two runs (A before, B after) per sync site and per rank");
  command->add_option("a", args->a, "run A (before)")->required();
  command->add_option("b", args->b, "run B (after)")->required();
  add_format_option(*command, args->format, {"text", "json"});
  add_step_option(*command, args->step);
  return {command, [args] { return diff(*args); }};
}

}  // namespace trainshim::cli
