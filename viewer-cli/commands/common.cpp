#include "common.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "output_text.hpp"
#include "report_json.hpp"
#include "report_text.hpp"
#include "run_database.hpp"

namespace trainshim::cli {

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

void add_step_option(CLI::App& command, std::string& step) {
  command.add_option("--step", step,
                     "what one training step is: a Python function or file:line "
                     "(default: $TRAINSHIM_STEP, else detected)");
}

void add_format_option(CLI::App& command, std::string& format, const std::vector<std::string>& formats) {
  format = formats.front();
  CLI::Option* option =
      command.add_option("--format", format, "output format")->check(CLI::IsMember(formats))->capture_default_str();
  if (std::find(formats.begin(), formats.end(), "json") != formats.end())
    command
        .add_flag_callback(
            "--json", [&format] { format = "json"; }, "same as --format json")
        ->excludes(option);
}

void print_report(const Report& report, const std::string& format) {
  std::cout << (format == "json" ? json_text(render_json(report)) + "\n" : reader_text(render_text(report)));
}

}  // namespace trainshim::cli
