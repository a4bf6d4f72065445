#pragma once
// Names shared by the shim, the collector and the CLI: the job id, the segment names and the
// collector's lock file. A segment is "/dev/shm/trainshim-<uid>-<job>-<pid>".
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
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
    out.push_back(keep ? c : '_');
  }
  return out.empty() ? std::string("job") : out;
}

// TRAINSHIM_JOB, else torchrun's run id, else Slurm's job id, else the process group.
inline std::string job_from_environment() {
  for (const char* name : {"TRAINSHIM_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}) {
    const char* value = std::getenv(name);
    if (value && *value) return sanitize_job(value);
  }
  return "pg" + std::to_string(getpgrp());
}

inline std::string segment_prefix(uid_t uid, std::string_view job) {
  return "trainshim-" + std::to_string(uid) + "-" + std::string(job) + "-";
}

inline std::string segment_name(uid_t uid, std::string_view job, pid_t pid) {
  return segment_prefix(uid, job) + std::to_string(pid);
}

// Held (flock) by the job's collector for as long as it runs.
inline std::string collector_lock_path(uid_t uid, std::string_view job) {
  return std::string(kShmDir) + "/trainshim-" + std::to_string(uid) + "-" + std::string(job) + ".lock";
}

}  // namespace trainshim
