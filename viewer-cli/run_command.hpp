#pragma once
// `trainshim run -- CMD ...` and `trainshim collect`.
#include <string>
#include <vector>

namespace trainshim::cli {

struct RunOptions {
  std::string out;  // database path; empty: $TRAINSHIM_OUT, else ./trainshim-<job>.db
  bool json = false;
  bool report = true;
  std::string step;  // TRAINSHIM_STEP: "file:line" or a Python function; empty: detect
  std::vector<std::string> command;
};

// Starts the job's collector, runs the command with the shim preloaded, waits for both and
// prints the report. Returns the command's exit status (128 + signal when it was killed).
int run_command(const RunOptions& options);

// Runs a collector in the foreground for `job` (drains segments left by a run that had none).
int collect_command(const std::string& job, const std::string& out, double idle_exit_seconds);

// The directory holding this executable (and, beside it, the shim and the collector).
std::string own_directory();

}  // namespace trainshim::cli
