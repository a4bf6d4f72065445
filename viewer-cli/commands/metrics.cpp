// `trainshim metrics [DB ...] [--listen HOST:PORT] [--textfile PATH] [--interval S] [--once]
//                    [--remove-on-exit] [--format prometheus|openmetrics] [--step STEP]`
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <httplib.h>
#include <signal.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "commands.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "output_file.hpp"
#include "render/metrics.hpp"
#include "store/rows.hpp"
#include "store/run_database.hpp"

namespace trainshim::cli {

namespace {

struct MetricsArguments {
  std::vector<std::string> databases;
  std::string listen, textfile, format, step;
  double interval_s = 15;
  bool once = false;
  bool remove_on_exit = false;
};

// The HTTP endpoint and the textfile, from the flags, else from TRAINSHIM_METRICS ("HOST:PORT" or
// "textfile:PATH").
void targets_from_environment(MetricsArguments& args) {
  if (!args.listen.empty() || !args.textfile.empty()) return;
  const char* value = std::getenv("TRAINSHIM_METRICS");
  if (!value || !*value) return;
  const MetricsTarget target = parse_metrics_target(value, "TRAINSHIM_METRICS=");
  args.listen = target.listen;
  args.textfile = target.textfile;
}

// --interval's default: TRAINSHIM_METRICS_INTERVAL, for the exporter a collector starts.
void interval_from_environment(MetricsArguments& args, const CLI::App& command) {
  const char* value = std::getenv("TRAINSHIM_METRICS_INTERVAL");
  if (command.count("--interval") || !value || !*value) return;
  char* end = nullptr;
  const double seconds = std::strtod(value, &end);
  if (*end != '\0' || !(seconds >= 1 && seconds <= 3600))
    throw UsageError(fmt::format("TRAINSHIM_METRICS_INTERVAL={}: give a number of seconds from 1 to 3600", value));
  args.interval_s = seconds;
}

struct Exposed {
  std::string prometheus, open_metrics;
  std::string hangs;  // hangs_signature of the hangs it shows
};

// What a reading says of the hangs the collectors detected: which collectives hang and whom they
// wait for (not the stacks, which the collector rewrites at each pass).
std::string hangs_signature(const std::vector<HangRow>& hangs) {
  std::string out;
  for (const HangRow& h : hangs)
    out += fmt::format("{}|{}|{}|{}|{};", int(h.kind), h.communicator, h.op, h.sequence, fmt::join(h.missing, ","));
  return out;
}

// The run's metrics now, in both formats; reads every database afresh (the collector goes on
// writing them).
Exposed compute(const MetricsArguments& args) {
  const auto began = std::chrono::steady_clock::now();
  const OpenDatabases databases(args.databases);
  check_one_launch(databases.all());
  const Report report = read_report(databases.all(), step_name(args.step), 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return {render_metrics(report, MetricsFormat::Prometheus, took),
          render_metrics(report, MetricsFormat::OpenMetrics, took), hangs_signature(report.hangs)};
}

// The hangs stored now: a small read, made every second between two readings, so that a hang
// shows within a second or two of its detection whatever the interval. Empty when a database
// cannot be read (the next reading says why).
std::optional<std::string> hangs_now(const MetricsArguments& args) {
  try {
    std::vector<HangRow> hangs;
    const OpenDatabases databases(args.databases);
    for (const RunDatabase* db : databases.all())
      for (HangRow& h : read_hangs(*db)) hangs.push_back(std::move(h));
    return hangs_signature(hangs);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::atomic<bool> g_stop{false};
void request_stop(int) { g_stop = true; }

int serve(MetricsArguments args, const CLI::App& command) {
  interval_from_environment(args, command);
  if (args.databases.empty()) args.databases.push_back(database_argument(""));
  targets_from_environment(args);
  const MetricsFormat format = args.format == "openmetrics" ? MetricsFormat::OpenMetrics : MetricsFormat::Prometheus;
  auto write_textfile = [&](const Exposed& e) {
    write_output(
        args.textfile, "metrics",
        [&](std::ostream& out) { out << (format == MetricsFormat::OpenMetrics ? e.open_metrics : e.prometheus); },
        "--textfile (or TRAINSHIM_METRICS=textfile:PATH)");
  };

  if (args.once || (args.listen.empty() && args.textfile.empty())) {
    const Exposed e = compute(args);
    if (!args.textfile.empty()) write_textfile(e);
    else std::cout << (format == MetricsFormat::OpenMetrics ? e.open_metrics : e.prometheus) << std::flush;
    return 0;
  }

  // The endpoint hands out the latest exposition; computing the next one never holds it up. Until
  // the databases could be read once it is empty.
  std::mutex latest_mutex;
  auto latest = std::make_shared<const Exposed>(Exposed{"", "# EOF\n", ""});
  // A database that cannot be read is tried again next interval; a textfile that cannot be
  // written the first time is the user's mistake (exit 2), later a passing one (a full disk).
  auto refresh = [&](bool first) {
    std::shared_ptr<const Exposed> fresh;
    try {
      fresh = std::make_shared<const Exposed>(compute(args));
    } catch (const std::exception& e) {
      std::cerr << "trainshim metrics: " << e.what() << "; trying again in " << args.interval_s << " s\n";
      return;
    }
    try {
      if (!args.textfile.empty()) write_textfile(*fresh);
    } catch (const std::exception& e) {
      if (first) throw;
      std::cerr << "trainshim metrics: " << e.what() << "\n";
    }
    std::lock_guard lock(latest_mutex);
    latest = std::move(fresh);
  };
  // Before the first textfile is written: one stopped at once still removes it (--remove-on-exit).
  struct sigaction action {};
  action.sa_handler = request_stop;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  refresh(true);

  httplib::Server server;
  std::thread listener;
  std::atomic<bool> listener_done{false};
  if (!args.listen.empty()) {
    const auto [host, port] = host_and_port(args.listen, "--listen ");
    server.Get("/metrics", [&](const httplib::Request& request, httplib::Response& response) {
      std::shared_ptr<const Exposed> now;
      {
        std::lock_guard lock(latest_mutex);
        now = latest;
      }
      const bool open_metrics =
          request.get_header_value("Accept").find("application/openmetrics-text") != std::string::npos;
      const MetricsFormat served = open_metrics ? MetricsFormat::OpenMetrics : MetricsFormat::Prometheus;
      response.set_content(open_metrics ? now->open_metrics : now->prometheus, metrics_content_type(served));
    });
    const int bound = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
    if (bound < 0)
      throw UsageError(fmt::format("--listen {}: cannot listen there (the port is taken, or the address is not this "
                                   "host's); choose another port",
                                   args.listen));
    std::cout << fmt::format("trainshim metrics: serving http://{}:{}/metrics", host, bound) << std::endl;
    listener = std::thread([&server, &listener_done] {
      server.listen_after_bind();
      listener_done = true;
    });
  }

  const auto interval =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(args.interval_s));
  auto next = std::chrono::steady_clock::now() + interval;
  auto next_hang_check = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!g_stop) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_hang_check) {
      next_hang_check = now + std::chrono::seconds(1);
      const std::optional<std::string> hangs = hangs_now(args);
      std::string shown;
      {
        std::lock_guard lock(latest_mutex);
        shown = latest->hangs;
      }
      if (hangs && *hangs != shown) next = now;
    }
    if (now < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    next = now + interval;
    refresh(false);
  }
  if (listener.joinable()) {
    // stop() does nothing until the listener runs: a stop asked for during the first reading would
    // otherwise leave it serving for good.
    while (!server.is_running() && !listener_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    server.stop();
    listener.join();
  }
  // A textfile left behind would have node_exporter serve the ended job's series for good: its
  // straggler and idle alerts would go on firing.
  std::error_code not_removed;
  if (args.remove_on_exit && !args.textfile.empty()) std::filesystem::remove(args.textfile, not_removed);
  return 0;
}

}  // namespace

Command add_metrics_command(CLI::App& app) {
  auto args = std::make_shared<MetricsArguments>();
  CLI::App* command = app.add_subcommand(
      "metrics", "the run's metrics for Prometheus: printed, served over HTTP, or written for node_exporter");
  command->add_option("databases", args->databases, "run databases (default: the newest ./trainshim-*.db)");
  command->add_option("--listen", args->listen,
                      "serve http://HOST:PORT/metrics (default: $TRAINSHIM_METRICS when it is HOST:PORT)");
  command->add_option("--textfile", args->textfile,
                      "write the metrics to this file, replaced whole each interval, for node_exporter's textfile "
                      "collector (default: $TRAINSHIM_METRICS when it is textfile:PATH)");
  command->add_option("--interval", args->interval_s, "seconds between two readings of the databases")
      ->default_str("$TRAINSHIM_METRICS_INTERVAL, else 15")
      ->check(CLI::Range(1.0, 3600.0));
  command->add_flag("--once", args->once, "read once, print or write, and exit");
  command->add_flag("--remove-on-exit", args->remove_on_exit,
                    "remove the textfile when stopped (SIGTERM, SIGINT), so that node_exporter serves no ended job's "
                    "series; set when a collector runs the exporter");
  add_format_option(*command, args->format, {"prometheus", "openmetrics"});
  add_step_option(*command, args->step);
  return {command, [args, command] { return serve(*args, *command); }};
}

}  // namespace trainshim::cli
