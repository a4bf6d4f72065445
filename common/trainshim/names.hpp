#pragma once
// Names shared by the shim, the collector and the CLI: the job id, the database, the segment names
// and the collector's lock file. A segment is "/dev/shm/trainshim-<uid>-<job>-<pid>".
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace trainshim {

inline constexpr std::string_view kShmDir = "/dev/shm";

// Keeps [A-Za-z0-9_.] and maps everything else to '_', so any job id makes a safe file name.
inline std::string sanitize_job(std::string_view raw) {
  std::string out;
  for (char c : raw.substr(0, 100)) {
    const bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
    out.push_back(keep ? c : '_');
  }
  return out.empty() ? std::string("job") : out;
}

// torchrun names every launch without --rdzv-id (and without --standalone, which makes a uuid)
// "none": the default of --rdzv-id in torch/distributed/run.py. Such a run id identifies nothing.
inline bool is_placeholder_run_id(std::string_view id) { return id.empty() || id == "none"; }

// The directory torchrun's agent made for this launch, empty if there is none. In
// torch/distributed/elastic/multiprocessing/api.py, DefaultLogsSpecs.reify sets each worker's
// TORCHELASTIC_ERROR_FILE to <log dir>/<run id>_<random>/attempt_<restart>/<local rank>/error.json,
// where <run id>_<random> comes from tempfile.mkdtemp in DefaultLogsSpecs._make_log_dir, once per
// agent: it differs per launch and is the same for every local rank and every restart. DataLoader
// workers inherit it (fork copies the environment, spawn passes os.environ to the new
// interpreter). With --log-dir /dev/null, reify sets TORCHELASTIC_ERROR_FILE to "".
inline std::string torchrun_launch_directory() {
  const char* value = std::getenv("TORCHELASTIC_ERROR_FILE");
  std::string_view path = value ? value : "";
  auto drop_last = [&path](auto&& accept) {
    const auto slash = path.rfind('/');
    if (slash == std::string_view::npos || !accept(path.substr(slash + 1))) return false;
    path = path.substr(0, slash);
    return true;
  };
  auto digits = [](std::string_view s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
  };
  auto attempt = [&](std::string_view s) { return s.starts_with("attempt_") && digits(s.substr(8)); };
  const bool launch_layout =
      drop_last([](std::string_view s) { return s == "error.json"; }) && drop_last(digits) && drop_last(attempt);
  return launch_layout && !path.empty() ? std::string(path) : std::string();
}

// TRAINSHIM_JOB, else torchrun's run id (its placeholder replaced by this launch's directory
// name, "none_<random>"), else Slurm's job id, else the process group.
inline std::string job_from_environment() {
  if (const char* value = std::getenv("TRAINSHIM_JOB"); value && *value) return sanitize_job(value);
  const char* run_id = std::getenv("TORCHELASTIC_RUN_ID");
  if (run_id && !is_placeholder_run_id(run_id)) return sanitize_job(run_id);
  if (run_id && *run_id) {
    if (const std::string launch = torchrun_launch_directory(); !launch.empty())
      return sanitize_job(launch.substr(launch.rfind('/') + 1));
  }
  if (const char* value = std::getenv("SLURM_JOB_ID"); value && *value) return sanitize_job(value);
  // torchrun's workers each start a session of their own: a process group would split the ranks.
  // Without its log directory the placeholder is all they share.
  if (run_id && *run_id) return sanitize_job(run_id);
  return "pg" + std::to_string(getpgrp());
}

// The database a job writes where none is named: TRAINSHIM_OUT, else ./trainshim-<job>.db.
inline std::string default_database(std::string_view job) {
  if (const char* value = std::getenv("TRAINSHIM_OUT"); value && *value) return value;
  return "trainshim-" + std::string(job) + ".db";
}

// What tells one launch of a job from another with the same job id, empty if unknown: a
// database holds one launch (meta key "launch"). TRAINSHIM_LAUNCH, else torchrun's launch
// directory, else the Slurm job.
inline std::string launch_from_environment() {
  if (const char* value = std::getenv("TRAINSHIM_LAUNCH"); value && *value) return value;
  if (std::string torchrun = torchrun_launch_directory(); !torchrun.empty()) return "torchrun:" + torchrun;
  if (const char* value = std::getenv("SLURM_JOB_ID"); value && *value) return std::string("slurm:") + value;
  return {};
}

inline std::string segment_prefix(uid_t uid, std::string_view job) {
  return "trainshim-" + std::to_string(uid) + "-" + std::string(job) + "-";
}

inline std::string segment_name(uid_t uid, std::string_view job, pid_t pid) {
  return segment_prefix(uid, job) + std::to_string(pid);
}

// Held (flock) by the job's collector for as long as it runs. Another user may own a name in
// the shared directory first: the next candidates ("<name>.1" ... ) are tried in order.
inline constexpr int kLockCandidates = 16;
inline std::string collector_lock_path(uid_t uid, std::string_view job, int candidate = 0) {
  std::string path = std::string(kShmDir) + "/trainshim-" + std::to_string(uid) + "-" + std::string(job) + ".lock";
  return candidate == 0 ? path : path + "." + std::to_string(candidate);
}

}  // namespace trainshim
