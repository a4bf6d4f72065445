#pragma once
// What several commands take or print alike: the database argument, --step, --format (and --json)
// and the report.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "diagnose/report_model.hpp"
#include "render/report_text.hpp"
#include "store/run_database.hpp"
#include "text/text_layout.hpp"

namespace trainshim::cli {

// The database the user named, else the newest ./trainshim-*.db; UsageError if there is none.
std::string database_argument(const std::string& given);

// --step's value, else $TRAINSHIM_STEP, else empty (steps are detected).
std::string step_name(const std::string& given);
// Adds --step to `command`.
void add_step_option(CLI::App& command, std::string& step);

// Adds --format, one of `formats` (the first is the default), checked as CLI11 checks any value;
// where "json" is one of them, also --json, which means --format json.
void add_format_option(CLI::App& command, std::string& format, const std::vector<std::string>& formats);

// How the text report is printed: --top, --summary, --color.
struct TextArguments {
  TextOptions options;
  ColorMode color = ColorMode::Auto;
};
// Adds --top N, --summary and --color WHEN to `command`.
void add_text_options(CLI::App& command, TextArguments& text);

// The run databases a command was given, opened (each checked as RunDatabase checks it), and the
// views the readers take.
class OpenDatabases {
 public:
  explicit OpenDatabases(const std::vector<std::string>& paths);
  const std::vector<const RunDatabase*>& all() const { return views_; }

 private:
  std::vector<std::unique_ptr<RunDatabase>> open_;
  std::vector<const RunDatabase*> views_;
};

// A job's databases are one per node of one launch: each rank in one of them, every rank of one
// world size, one launch (torchrun's run id unless it is "none", Slurm's job id, $TRAINSHIM_LAUNCH)
// where the collectors knew it. Two of different launches, two holding the same rank (-1: two processes started without
// a launcher) or ranks of different world sizes are two runs, whose merge would name a straggler
// across them: UsageError, saying what to do instead (`merge_option`, when the command has one).
void check_one_launch(const std::vector<const RunDatabase*>& databases, const std::string& merge_option = "");

// Where `trainshim metrics` puts the metrics: a TRAINSHIM_METRICS value or --metrics argument,
// "HOST:PORT" (served over HTTP) or "textfile:PATH" (written for node_exporter); UsageError, naming
// `source` ("--metrics ", "TRAINSHIM_METRICS="), when it is neither.
struct MetricsTarget {
  std::string listen, textfile;
};
MetricsTarget parse_metrics_target(const std::string& value, const std::string& source);
// HOST:PORT split (HOST may be a bracketed IPv6 address); UsageError, naming `source`, when it is not one.
std::pair<std::string, int> host_and_port(const std::string& listen, const std::string& source);
// Adds --metrics TARGET to a command that starts a collector (`run`, `collect`): the collector
// runs `trainshim metrics` on its database while it runs (TRAINSHIM_METRICS).
void add_metrics_option(CLI::App& command, std::string& target);
// Sets TRAINSHIM_METRICS from --metrics, after checking it, for the collector to come.
void export_metrics_target(const std::string& target);

// The report as "text" (fitted to the terminal's width, coloured where `text` says and only on
// standard output), "json" or "html", written to `output` ("-": standard output; a file is written
// whole or not at all, as write_output does).
void print_report(const Report& report, const std::string& format, const TextArguments& text,
                  const std::string& output = "-");

}  // namespace trainshim::cli
