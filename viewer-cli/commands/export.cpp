// `trainshim export [DB] [--format chrome] [--step STEP] -o FILE`.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "commands.hpp"
#include "common.hpp"
#include "output_file.hpp"
#include "render/export.hpp"
#include "store/run_database.hpp"

namespace trainshim::cli {

namespace {

struct ExportArguments {
  std::string database, format, output, step;
};

}  // namespace

void export_trace(const std::string& database, const std::string& output, const std::string& step) {
  if (output.empty()) throw UsageError("no output: pass -o trace.json (or -o - for standard output)");
  RunDatabase db(database);
  write_output(output, "trace", [&](std::ostream& file) { export_chrome_trace(db, file, step); });
}

Command add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArguments>();
  CLI::App* command = app.add_subcommand("export", "write a run as a trace for Perfetto UI or chrome://tracing");
  command->add_option("database", args->database, "run database (default: the newest ./trainshim-*.db)");
  add_format_option(*command, args->format, {"chrome"});
  command->add_option("-o,--output", args->output, "trace file to write (- for standard output)")->required();
  add_step_option(*command, args->step);
  return {command, [args] {
            export_trace(database_argument(args->database), args->output, step_name(args->step));
            return 0;
          }};
}

}  // namespace trainshim::cli
