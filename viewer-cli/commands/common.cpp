#include "common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <string_view>

#include "errors.hpp"
#include "output_file.hpp"
#include "render/report_html.hpp"
#include "render/report_json.hpp"
#include "render/report_text.hpp"
#include "store/rows.hpp"
#include "store/run_database.hpp"
#include "text/output_text.hpp"
#include "trainshim/names.hpp"

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

namespace {

// What of a database's launch (launch_from_environment) the other nodes' databases share. torchrun's
// is its agent's log directory, each node's own: <log dir>/<run id>_<8 random characters>
// (DefaultLogsSpecs._make_log_dir, tempfile.mkdtemp); only the run id is the job's, and not even that
// when it is the placeholder "none" (empty: nothing to compare).
std::string launch_across_nodes(const std::string& launch) {
  constexpr std::string_view kTorchrun = "torchrun:";
  if (!launch.starts_with(kTorchrun)) return launch;
  const std::string directory = launch.substr(launch.rfind('/') + 1);
  constexpr std::size_t kRandom = 8;
  if (directory.size() <= kRandom + 1 || directory[directory.size() - kRandom - 1] != '_') return {};
  const std::string run_id = directory.substr(0, directory.size() - kRandom - 1);
  return is_placeholder_run_id(run_id) ? std::string() : "torchrun run " + run_id;
}

}  // namespace

OpenDatabases::OpenDatabases(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) views_.push_back(open_.emplace_back(std::make_unique<RunDatabase>(path)).get());
}

void check_one_launch(const std::vector<const RunDatabase*>& databases, const std::string& merge_option) {
  const std::string advice =
      "report each alone, compare two with `trainshim diff BEFORE.db AFTER.db`" +
      (merge_option.empty() ? std::string() : ", or pass " + merge_option + " to merge them all the same");
  std::map<int64_t, const RunDatabase*> holder;  // by rank
  std::pair<int64_t, const RunDatabase*> world{-1, nullptr};
  std::pair<std::string, const RunDatabase*> launch{"", nullptr};
  for (const RunDatabase* db : databases) {
    if (const std::string its = launch_across_nodes(db->meta("launch")); !its.empty()) {
      if (!launch.second) launch = {its, db};
      else if (launch.first != its)
        throw UsageError(fmt::format("{} is of launch {}, {} of launch {}: two runs, not two nodes of one job; {}",
                                     launch.second->path(), launch.first, db->path(), its, advice));
    }
    const std::vector<ProcessRow> processes = read_processes(*db);
    std::set<int64_t> ranks;
    for (const ProcessRow& p : processes) ranks.insert(p.rank);
    for (const int64_t rank : ranks) {
      const auto [at, added] = holder.emplace(rank, db);
      if (!added)
        throw UsageError(fmt::format(
            "{} and {} both hold {}: two runs, not two nodes of one job; {}", at->second->path(), db->path(),
            rank < 0 ? std::string("a process started without a launcher") : fmt::format("rank {}", rank), advice));
    }
    int64_t size = -1;
    for (const ProcessRow& p : processes) size = std::max<int64_t>(size, p.world_size);
    if (size < 0) continue;
    if (!world.second) world = {size, db};
    if (world.first != size)
      throw UsageError(fmt::format("{} holds a job of {} ranks, {} a job of {}: two runs, not two nodes of one "
                                   "job; {}",
                                   world.second->path(), world.first, db->path(), size, advice));
  }
}

std::pair<std::string, int> host_and_port(const std::string& listen, const std::string& source) {
  const auto colon = listen.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon + 1 < listen.size()) {
    try {
      std::size_t used = 0;
      port = std::stoi(listen.substr(colon + 1), &used);
      if (used != listen.size() - colon - 1) port = -1;
    } catch (const std::exception&) {
      port = -1;
    }
  }
  if (colon == std::string::npos || colon == 0 || port < 0 || port > 65535)
    throw UsageError(
        fmt::format("{}{}: not HOST:PORT (such as 0.0.0.0:9464, or 127.0.0.1:0 for a free port)", source, listen));
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, port};
}

MetricsTarget parse_metrics_target(const std::string& value, const std::string& source) {
  constexpr std::string_view kTextfile = "textfile:";
  if (value.starts_with(kTextfile)) {
    if (value.size() == kTextfile.size())
      throw UsageError(
          fmt::format("{}{}: textfile: needs a path (textfile:/var/lib/node_exporter/trainshim.prom)", source, value));
    return {.listen = "", .textfile = value.substr(kTextfile.size())};
  }
  host_and_port(value, source);
  return {.listen = value, .textfile = ""};
}

void add_metrics_option(CLI::App& command, std::string& target) {
  command.add_option("--metrics", target,
                     "while the collector runs, serve its metrics for Prometheus at HOST:PORT, or write them to "
                     "textfile:PATH for node_exporter (sets TRAINSHIM_METRICS; docs/fleet.md)");
}

void export_metrics_target(const std::string& target) {
  if (target.empty()) return;
  parse_metrics_target(target, "--metrics ");
  setenv("TRAINSHIM_METRICS", target.c_str(), 1);
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
