#pragma once
// The subcommands of `trainshim`, one file each in this directory: a file reads its command's
// arguments, calls the library (trainshim_cli_core) and writes the output. main.cpp lists them.
#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace trainshim::cli {

// A subcommand added to the application, and its work once its arguments are parsed: the exit code.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_run_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_audit_command(CLI::App& app);
Command add_diff_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_collect_command(CLI::App& app);
Command add_dump_command(CLI::App& app);
Command add_metrics_command(CLI::App& app);

// What `trainshim export DB... -o OUTPUT` does: the trace of `databases` (a job's, one per node;
// check_one_launch) written to `output` ("-": standard output). A file is written beside its final name and renamed
// into place once complete, so a failed export leaves no half-written trace; an output that exists and is no regular
// file (a FIFO, a device) is written where it is. Throws UsageError for an output that cannot be created or renamed
// into place, std::runtime_error when writing fails (a full disk). With format "kineto", `output` is a folder (made
// when missing) of one Kineto trace per rank.
void export_trace(const std::vector<std::string>& databases, const std::string& format, const std::string& output,
                  const std::string& step = "");

}  // namespace trainshim::cli
