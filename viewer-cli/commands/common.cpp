#include "common.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>

#include "output_file.hpp"
#include "render/report_html.hpp"
#include "render/report_json.hpp"
#include "render/report_text.hpp"
#include "store/run_database.hpp"
#include "text/output_text.hpp"

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

void add_text_options(CLI::App& command, TextArguments& text) {
  command.add_option("--top", text.options.top, "causes shown in \"What to fix first\" (the rest are in Findings)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000}).description("1 to 1000"));
  command.add_flag("--summary", text.options.summary,
                   "print only the verdict: the job's step, its top causes, the straggler");
  command.add_option("--color", text.color, "colour the text: auto (a terminal and no $NO_COLOR), always or never")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, ColorMode>{
              {"auto", ColorMode::Auto}, {"always", ColorMode::Always}, {"never", ColorMode::Never}},
          CLI::ignore_case))
      ->default_str("auto");
}

void print_report(const Report& report, const std::string& format, const TextArguments& text,
                  const std::string& output) {
  std::string rendered;
  if (format == "json") rendered = json_text(render_json(report)) + "\n";
  else if (format == "html") rendered = render_html(report);
  else {
    rendered = fit_to_width(reader_text(render_text(report, text.options)), output_width());
    if (output == "-" && use_color(text.color)) rendered = colorize(rendered);
  }
  write_output(output, "report", [&](std::ostream& out) { out << rendered; });
}

}  // namespace trainshim::cli
