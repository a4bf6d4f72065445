// `trainshim export [DB...] [--format chrome|kineto] [--step STEP] -o FILE|DIR`.
#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "commands.hpp"
#include "common.hpp"
#include "output_file.hpp"
#include "render/export.hpp"
#include "render/kineto.hpp"
#include "store/run_database.hpp"

namespace trainshim::cli {

namespace {

struct ExportArguments {
  std::vector<std::string> databases;
  std::string format, output, step;
};

}  // namespace

void export_trace(const std::vector<std::string>& paths, const std::string& format, const std::string& output,
                  const std::string& step) {
  if (output.empty()) throw UsageError("no output: pass -o trace.json (or -o - for standard output)");
  const OpenDatabases databases(paths);
  check_one_launch(databases.all());
  if (format == "chrome") {
    write_output(output, "trace", [&](std::ostream& file) { export_chrome_trace(databases.all(), file, step); });
    return;
  }
  // Kineto's layout: a folder of one file per rank, as torch.profiler writes for a job; written with
  // `"key": value` spacing, which HTA's search for each file's rank ("rank":\s+N) needs.
  if (output == "-") throw UsageError("--format kineto writes a file per rank: pass a folder with -o DIR");
  std::error_code ec;
  if (std::filesystem::exists(output, ec) && !std::filesystem::is_directory(output, ec))
    throw UsageError(
        fmt::format("{}: not a folder, and --format kineto writes a file per rank: pass a folder with -o", output));
  std::filesystem::create_directories(output, ec);
  if (ec)
    throw UsageError(fmt::format("{}: cannot make the folder for the traces ({}): pass a writable folder with -o",
                                 output, ec.message()));
  for (const RunDatabase* db : databases.all())
    for_each_kineto_trace(*db, step, [&](const std::string& file, const nlohmann::ordered_json& trace) {
      write_output((std::filesystem::path(output) / file).string(), "trace",
                   [&](std::ostream& out) { out << trace.dump(0) << "\n"; });
    });
}

Command add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArguments>();
  CLI::App* command = app.add_subcommand("export", "write a run as a trace for Perfetto UI or chrome://tracing");
  command->add_option("databases", args->databases,
                      "run databases, one per node of the job, the first's clock the trace's (default: the newest "
                      "./trainshim-*.db)");
  add_format_option(*command, args->format, {"chrome", "kineto"});
  command
      ->add_option("-o,--output", args->output,
                   "trace file to write (- for standard output); with --format kineto, the folder of the ranks' files")
      ->required();
  add_step_option(*command, args->step);
  return {command, [args] {
            if (args->databases.empty()) args->databases.push_back(database_argument(""));
            export_trace(args->databases, args->format, args->output, step_name(args->step));
            return 0;
          }};
}

}  // namespace trainshim::cli
