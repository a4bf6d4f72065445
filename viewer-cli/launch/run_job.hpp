#pragma once
// A job run under the shim (`trainshim run`), and what `trainshim collect` needs to drain a job
// whose collector could not start.
#include <sys/types.h>

#include <string>
#include <vector>

namespace trainshim::cli {

struct JobRun {
  int status = 127;      // the command's exit status (128 + signal when it was killed)
  std::string database;  // absolute path of the database its collector writes; empty: none, as said
};

// Starts the job's collector, runs `command` with the shim preloaded and waits for both. `database`:
// the file to write; empty: $TRAINSHIM_OUT, else ./trainshim-<job>.db.
JobRun run_job(const std::vector<std::string>& command, const std::string& database);

// Whether shared memory holds a segment of `job` written by `uid`.
bool job_has_segment(uid_t uid, const std::string& job);

// The collector beside this executable, or $TRAINSHIM_COLLECTOR.
std::string collector_executable();

// The directory holding this executable (and, beside it, the shim and the collector).
std::string own_directory();

// `path` made absolute (the collector runs in another directory).
std::string absolute_path(const std::string& path);

}  // namespace trainshim::cli
